"""Framework-independent parts of hvd's Python bindings (Horovod's horovod.common)."""
