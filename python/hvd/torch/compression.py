"""Gradient compression for allreduce (Horovod's horovod.torch.compression)."""
import torch


class Compressor:
    """compress(tensor) -> (tensor, ctx) before the allreduce; decompress(tensor, ctx) after."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (halving the bytes); other dtypes unchanged. The
    casts are torch operations on the tensor's own device (a CUDA tensor stays on its GPU, cast
    on the current stream)."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.to(ctx)
        return tensor


class Compression:
    """Optional gradient compression for DistributedOptimizer and allreduce."""
    none = NoneCompressor
    fp16 = FP16Compressor
