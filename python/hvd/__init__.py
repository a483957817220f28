"""hvd's Python bindings. Horovod's PyTorch API is hvd.torch:

    import hvd.torch as hvd
    hvd.init()

(or, with build/python_compat on PYTHONPATH, `import horovod.torch as hvd`). The runtime is
libhvd.so, loaded through ctypes by hvd.common.basics; see python/README.md.
"""
__version__ = "0.1.0"
