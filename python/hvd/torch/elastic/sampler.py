"""ElasticSampler (Horovod 0.28's horovod.torch.elastic.ElasticSampler): a DistributedSampler
that remembers which samples of the epoch were processed, so that after a reset the rest of the
epoch is split over the new set of workers."""
import math

import torch.utils.data

from hvd.torch.mpi_ops import rank as _rank
from hvd.torch.mpi_ops import size as _size


class ElasticSampler(torch.utils.data.Sampler):
    """Splits a dataset over the ranks (as DistributedSampler) and splits what is left of the
    epoch again after a reset.

    Use it so:
      1. give it to the TorchState (`hvd.elastic.TorchState(model, optimizer, sampler=sampler)`),
         which saves, restores and syncs it and re-splits it after a reset;
      2. call `record_batch(batch_idx, batch_size)` after each batch (or `record_indices`);
      3. call `set_epoch(epoch + 1)` at the END of each epoch: it forgets the processed samples,
         so calling it at the start would process an interrupted epoch's samples again.

    Args:
        dataset: the dataset (its length must not change).
        shuffle: shuffle the samples (the same order on every rank: seed + epoch).
        seed: the shuffling seed; the same on every rank.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: a new order (when shuffling) and no processed samples. Call it
        at the end of an epoch, not at the start."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records batch `batch_idx` of this rank's samples (of `batch_size` each) as processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        """Records dataset indices as processed."""
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx, batch_size):
        """The dataset indices of this rank's batch `batch_idx` (of `batch_size` samples)."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self):
        return dict(epoch=self.epoch, processed_indices=set(self.processed_indices))

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self):
        """Splits the samples not yet processed this epoch over hvd.size() ranks (hvd must be
        initialized): the same split on every rank that has the same processed samples."""
        self.num_replicas = _size()
        self.rank = _rank()
        self.remaining_indices = [i for i in range(len(self.dataset))
                                  if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        self.indices = self._rank_indices()

    def _rank_indices(self):
        indices = list(self.remaining_indices)
        if self.shuffle:
            # torch's generator, as Horovod: the same order as Horovod's sampler gives.
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(indices), generator=g).tolist()
            indices = [indices[i] for i in order]
        # Pad to a multiple of the ranks by repeating from the start (every rank gets as many
        # samples, so every rank runs as many steps); repeated as often as needed when fewer
        # samples remain than ranks.
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        return indices[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        self.indices = self._rank_indices()
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
