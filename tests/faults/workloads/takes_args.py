"""A script with its own argparse options (--lr, --steps); exits 2 on unknown ones, as argparse does."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--steps", type=int, default=1)
args = parser.parse_args()
print(f"lr={args.lr} steps={args.steps}", flush=True)
