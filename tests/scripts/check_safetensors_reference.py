#!/usr/bin/env python3
"""Loads safetensors files with the reference `safetensors` library and fails on any it refuses.

Usage: check_safetensors_reference.py [--header-only] PATH...

Each PATH is a .safetensors file or a folder (searched recursively for *.safetensors). Every file is opened
with safetensors.safe_open, which validates the header and the tensors' data spans as the library does for
every load (contiguous from 0 to the end of the file; "invalid offset for tensor ..." otherwise). Unless
--header-only is given, every tensor is then read: with PyTorch when it is installed (all dtypes), else
with NumPy (dtypes NumPy lacks, such as BF16 and F8, are checked from the header only).

Exit status: 0 when every file loads, 1 when any fails (each failure printed with its file), 2 for a usage
error or no file found, 77 when the safetensors package (or NumPy, without PyTorch) is not installed, so
that CTest can report a skip (SKIP_RETURN_CODE 77).
"""
import os
import sys

SKIP = 77


def find_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".safetensors")]
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise FileNotFoundError(p)
    return sorted(files)


def pick_framework():
    try:
        import torch  # noqa: F401

        return "pt"
    except ImportError:
        pass
    try:
        import numpy  # noqa: F401

        return "numpy"
    except ImportError:
        return None


NUMPY_DTYPES = {"F64", "F32", "F16", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL"}


def check_file(path, safe_open, framework, header_only):
    """Number of tensors read in full; raises on any failure."""
    read = 0
    with safe_open(path, framework=framework) as f:
        for name in f.keys():
            s = f.get_slice(name)
            dtype, shape = s.get_dtype(), s.get_shape()
            if header_only or (framework == "numpy" and dtype not in NUMPY_DTYPES):
                continue
            t = f.get_tensor(name)
            if list(t.shape) != list(shape):
                raise ValueError(f"tensor '{name}': read with shape {list(t.shape)}, header says {shape}")
            read += 1
    return read


def main(argv):
    args = [a for a in argv if a != "--header-only"]
    header_only = len(args) != len(argv)
    if not args or any(a.startswith("-") for a in args):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        from safetensors import safe_open
    except ImportError as e:
        print(f"skipped: the safetensors Python package is not installed ({e})")
        return SKIP
    framework = pick_framework()
    if framework is None:
        print("skipped: neither PyTorch nor NumPy is installed (safetensors needs one)")
        return SKIP
    try:
        files = find_files(args)
    except FileNotFoundError as e:
        print(f"error: no such file or folder: {e}", file=sys.stderr)
        return 2
    if not files:
        print("error: no .safetensors file found in " + ", ".join(args), file=sys.stderr)
        return 2
    failed = 0
    for path in files:
        try:
            n = check_file(path, safe_open, framework, header_only)
            print(f"ok: {path} ({n} tensors read with {framework})")
        except Exception as e:  # the library's errors are not one class across versions
            failed += 1
            print(f"FAILED: {path}: {type(e).__name__}: {e}")
    print(f"{len(files) - failed} of {len(files)} file(s) load with the reference safetensors library")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
