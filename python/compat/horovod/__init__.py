"""Horovod's import names, served by hvd (build/python_compat; see python/README.md).

Only a directory that is put on PYTHONPATH on purpose (after build/python) provides it, so a real
Horovod installation is never shadowed by default:

    PYTHONPATH=build/python:build/python_compat python3 train.py    # import horovod.torch as hvd
"""
# The Horovod API level that hvd.torch implements (scripts sometimes compare versions).
__version__ = "0.28.1"
