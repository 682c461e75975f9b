"""A run's state in its output folder: whose the folder is and what a rerun keeps.

``output_dir`` decides what a run may delete; ``run_lock`` holds one run per folder;
``fingerprint`` says what a run will produce and ``resume`` which shards a rerun
keeps; ``versions`` records what each run added; ``fault_injection`` holds the
points where tests stop a run.
"""
