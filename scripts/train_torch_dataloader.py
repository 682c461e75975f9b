"""Trains a few steps of a small PyTorch model from our records, the way a PyTorch
user would: ``reader.records.ShardedRecords`` as a map-style Dataset in a
``DataLoader`` with two worker processes. Needs torch, not TensorFlow.

    python scripts/train_torch_dataloader.py <image data_dir> [--steps 20]

Prints the loss every few steps and, at the end, how many distinct records one epoch
of the DataLoader read against the split's length (each exactly once).
"""

from __future__ import annotations

import argparse
import collections
import sys

import torch
from torch.utils.data import DataLoader

from reader.records import ShardedRecords


def _batches(records: ShardedRecords, batch_size: int) -> DataLoader:
    return DataLoader(records, batch_size=batch_size, shuffle=True, num_workers=2,
                      generator=torch.Generator().manual_seed(0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    records = ShardedRecords(args.data_dir, "train", features=["image", "label", "key"])
    num_classes = len(records.manifest["label_vocab"])
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, num_classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    step = 0
    while step < args.steps:
        for batch in _batches(records, args.batch_size):
            images = batch["image"].permute(0, 3, 1, 2).float() / 255.0
            loss = torch.nn.functional.cross_entropy(model(images), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 5 == 0 or step == 1:
                print(f"step {step:3d}  loss {loss.item():.4f}")
            if step == args.steps:
                break
    seen = collections.Counter(key for batch in _batches(records, args.batch_size)
                               for key in batch["key"])
    once = all(count == 1 for count in seen.values())
    print(f"one epoch, DataLoader(num_workers=2): {len(seen)} distinct records of "
          f"{len(records)}, each read once: {once}; tensorflow imported: "
          f"{'tensorflow' in sys.modules}")
    return 0 if once and len(seen) == len(records) else 1


if __name__ == "__main__":
    sys.exit(main())
