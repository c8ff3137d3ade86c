#!/usr/bin/env python
"""Verify the shipped CUDA rows on this GPU and write each one's golden record into its row line.

    python scripts/verify_shipped.py [ROW ...]        # default: every jit row in kernels/ops/

A shipped ``.cu`` row carries its golden record on its first line. A new or
edited source starts unverified (dispatch never picks it); this runs
``verify`` on each row here and rewrites the line with the result: verified
with the per-dtype differences when it passes, unverified when it fails.
The source below the line is not touched. Exit status 1 when any row fails.
"""
from __future__ import annotations

import argparse
import sys

import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.golden import verify
from rapid_llm.kernels.toolchain.jit_row import JitRow, read_header, write_header


def shipped_jit_rows() -> list[str]:
    return sorted(r.name for op in spec.all_ops() for r in spec.rows_for(op)
                  if isinstance(r.target, JitRow) and r.target.source.is_relative_to(platform.OPS_DIR))


def record(name: str) -> bool:
    row = spec.get_row(name)
    report = verify(name)
    print(report, "\n")
    path = row.target.source
    text = path.read_text()
    fields = read_header(text, str(path))
    fields["golden"] = report.record.to_json()
    tmp = path.with_suffix(".cu.tmp")
    tmp.write_text(write_header(text, fields))
    tmp.replace(path)
    return report.passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="*", help="row names (default: every shipped jit row)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("verify_shipped: needs a CUDA device")
        return 1
    names = args.rows or shipped_jit_rows()
    failed = [n for n in names if not record(n)]
    print(f"verified {len(names) - len(failed)} of {len(names)} rows" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
