"""Refusing a command line with a flag that neither the job nor Beam knows."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

# Options classes defined in Beam itself; other PipelineOptions subclasses loaded in
# the process (another job's options) are not this job's flags.
_BEAM_PACKAGE = "apache_beam."


def _known_options_classes(options_class: type[PipelineOptions]
                           ) -> list[type[PipelineOptions]]:
    """The job's options class and its bases, then every options class Beam defines."""
    own = [cls for cls in options_class.mro()
           if issubclass(cls, PipelineOptions) and cls is not PipelineOptions]
    beam_classes = [cls for cls in PipelineOptions.__subclasses__()
                    if cls.__module__.startswith(_BEAM_PACKAGE)]
    return own + [cls for cls in beam_classes if cls not in own]


def _parser(options_class: type[PipelineOptions]) -> _BeamArgumentParser:
    # Beam's own parser class: some Beam options classes declare their flags with
    # its add_value_provider_argument, which argparse's parser lacks.
    parser = _BeamArgumentParser(allow_abbrev=False)
    for cls in _known_options_classes(options_class):
        if "_add_argparse_args" in cls.__dict__:
            cls._add_argparse_args(parser)
    return parser


def _describe(argument: str, known_flags: Sequence[str]) -> str:
    """``--imag_size=64`` → ``--imag_size (did you mean --image_size?)``."""
    flag = argument.split("=", 1)[0]
    if not flag.startswith("-"):
        return f"{argument!r} (not a flag)"
    suggestions = difflib.get_close_matches(flag, known_flags, n=1)
    return f"{flag} (did you mean {suggestions[0]}?)" if suggestions else flag


def check_known_flags(argv: Sequence[str], options_class: type[PipelineOptions]) -> None:
    """Raises for any argument that ``options_class`` and Beam's options do not know.

    Beam itself only logs "Unparseable argument" for such an argument and runs on
    with the defaults; a misspelled flag is refused here, before anything runs. The
    suggestion is the closest known flag, chosen as Beam's warning chooses it
    (``difflib.get_close_matches`` over every known flag).

    Raises:
        ValueError: naming each unknown argument and, where there is one, the
            closest known flag.
    """
    parser = _parser(options_class)
    _, unknown = parser.parse_known_args(list(argv))
    known_flags = [flag for action in parser._actions for flag in action.option_strings]
    problems: list[str] = []
    for index, argument in enumerate(unknown):
        follows_unknown_flag = (index > 0 and unknown[index - 1].startswith("-")
                                and "=" not in unknown[index - 1])
        if follows_unknown_flag and not argument.startswith("-"):
            continue  # The value of the unknown flag before it (--imag_size 64).
        problems.append(_describe(argument, known_flags))
    if problems:
        noun = "argument" if len(problems) == 1 else "arguments"
        raise ValueError(f"Unknown {noun} {', '.join(problems)}; see --help for this "
                         f"job's flags.")
