// An NcclComm for machines without a GPU: the ranks (forked processes of one test) exchange each
// collective's buffers through files in a directory they share, and every rank computes the
// result from all of them. Slow and simple, but the calls, their arguments and their order are the
// runtime's own, so the NCCL path of the device executor (packing, offsets, even and uneven
// blocks, scales, joined ranks, device results) runs on CI. The real NCCL is tested on a GPU
// (tests/gpu/nccl_test.cc).
//
// Each call is one exchange: rank r writes `<dir>/<id>.<call>.<r>` (to a temporary name, then
// renamed, so a reader never sees half a file) and reads every rank's file of the same call.
// A rank whose peer never writes fails after 30 s, naming the call and the peer. Where NCCL would
// misbehave, this fails: ranks that disagree on a call (its kind, count, type, operation or root:
// each file starts with them), and buffers that overlap otherwise than NCCL's in-place rules allow
// (allreduce: send == recv; reducescatter: recv == send + rank x block; allgather: send == recv +
// rank x block; send/recv: never).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "collectives/reduce.h"
#include "gpu/gpu_backend.h"

namespace hvd::testing {

class FileNcclComm : public runtime::gpu::NcclComm {
 public:
  FileNcclComm(std::string dir, std::string id, int rank, int size)
      : dir_(std::move(dir)), id_(std::move(id)), rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status Allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                   void* stream) override {
    const size_t bytes = count * DataTypeSize(dtype);
    HVD_RETURN_IF_ERROR(InPlace("allreduce", send, bytes, recv, bytes, recv));
    std::vector<std::string> all;
    HVD_RETURN_IF_ERROR(Exchange(Call("allreduce", count, dtype, op), Bytes(send, bytes), &all));
    std::vector<char> acc(all[0].begin(), all[0].end());
    for (int p = 1; p < size_; ++p) {
      runtime::collectives::ReduceInto(acc.data(), all[p].data(), count, dtype, op);
    }
    if (bytes > 0) std::memcpy(recv, acc.data(), bytes);
    return Status::OK();
  }

  Status Broadcast(void* buf, size_t bytes, int root, void* stream) override {
    std::vector<std::string> all;
    HVD_RETURN_IF_ERROR(Exchange(Call("broadcast", bytes, DataType::kUInt8, ReduceOp::kSum, root),
                                 rank_ == root ? Bytes(buf, bytes) : std::string(), &all));
    if (bytes > 0) std::memcpy(buf, all[root].data(), bytes);
    return Status::OK();
  }

  Status Allgather(const void* send, void* recv, size_t send_bytes, void* stream) override {
    char* out = static_cast<char*>(recv);
    HVD_RETURN_IF_ERROR(
        InPlace("allgather", send, send_bytes, recv, send_bytes * size_, out + rank_ * send_bytes));
    std::vector<std::string> all;
    HVD_RETURN_IF_ERROR(Exchange(Call("allgather", send_bytes, DataType::kUInt8, ReduceOp::kSum),
                                 Bytes(send, send_bytes), &all));
    for (int p = 0; p < size_; ++p) {
      if (send_bytes > 0) std::memmove(out + p * send_bytes, all[p].data(), send_bytes);
    }
    return Status::OK();
  }

  Status Reducescatter(const void* send, void* recv, size_t recv_count, DataType dtype, ReduceOp op,
                       void* stream) override {
    const size_t block = recv_count * DataTypeSize(dtype);
    // NCCL's in place: this rank's block of the input is the output.
    HVD_RETURN_IF_ERROR(InPlace("reducescatter", recv, block, send, block * size_,
                                static_cast<const char*>(send) + rank_ * block));
    std::vector<std::string> all;
    HVD_RETURN_IF_ERROR(
        Exchange(Call("reducescatter", recv_count, dtype, op), Bytes(send, block * size_), &all));
    std::vector<char> acc(all[0].begin(), all[0].end());
    for (int p = 1; p < size_; ++p) {
      runtime::collectives::ReduceInto(acc.data(), all[p].data(), recv_count * size_, dtype, op);
    }
    if (block > 0) std::memcpy(recv, acc.data() + rank_ * block, block);
    return Status::OK();
  }

  // Each rank writes, for every peer, [8-byte length][bytes]; every rank reads its own block.
  Status Alltoall(const void* send, const size_t* send_bytes, const size_t* send_offsets,
                  void* recv, const size_t* recv_bytes, const size_t* recv_offsets,
                  void* stream) override {
    size_t sent = 0, received = 0;
    for (int p = 0; p < size_; ++p) {
      sent = std::max(sent, send_offsets[p] + send_bytes[p]);
      received = std::max(received, recv_offsets[p] + recv_bytes[p]);
    }
    HVD_RETURN_IF_ERROR(InPlace("alltoall", send, sent, recv, received, nullptr));
    std::string out;
    for (int p = 0; p < size_; ++p) {
      const uint64_t n = send_bytes[p];
      out.append(reinterpret_cast<const char*>(&n), sizeof(n));
      out.append(static_cast<const char*>(send) + send_offsets[p], send_bytes[p]);
    }
    std::vector<std::string> all;
    HVD_RETURN_IF_ERROR(Exchange(Call("alltoall", 0, DataType::kUInt8, ReduceOp::kSum), out, &all));
    for (int p = 0; p < size_; ++p) {
      size_t at = 0;
      for (int q = 0;; ++q) {
        uint64_t n = 0;
        if (at + sizeof(n) > all[p].size()) return Internal("alltoall: a short block list");
        std::memcpy(&n, all[p].data() + at, sizeof(n));
        at += sizeof(n);
        if (q == rank_) {
          if (n != recv_bytes[p]) {
            return Internal("alltoall: rank " + std::to_string(p) + " sent " + std::to_string(n) +
                            " bytes, " + std::to_string(recv_bytes[p]) + " expected");
          }
          if (n > 0) std::memcpy(static_cast<char*>(recv) + recv_offsets[p], all[p].data() + at, n);
          break;
        }
        at += n;
      }
    }
    return Status::OK();
  }

  Status AsyncError() override { return Status::OK(); }
  void Abort() override {}

 private:
  static std::string Bytes(const void* p, size_t n) {
    return n > 0 ? std::string(static_cast<const char*>(p), n) : std::string();
  }

  static std::string Call(const char* what, size_t count, DataType dtype, ReduceOp op,
                          int root = -1) {
    return std::string(what) + " count=" + std::to_string(count) +
           " dtype=" + std::to_string(static_cast<int>(dtype)) +
           " op=" + std::to_string(static_cast<int>(op)) + " root=" + std::to_string(root);
  }

  // `a` (a_bytes) and `b` (b_bytes) may overlap only with `a` at `allowed` (null: never).
  static Status InPlace(const char* what, const void* a, size_t a_bytes, const void* b,
                        size_t b_bytes, const void* allowed) {
    const char* pa = static_cast<const char*>(a);
    const char* pb = static_cast<const char*>(b);
    const bool overlap = a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
    if (!overlap || pa == allowed) return Status::OK();
    return InvalidArgument(std::string(what) +
                           ": the send and receive buffers overlap otherwise than NCCL's in-place "
                           "rule allows");
  }

  // `call` says what this rank calls (every rank must call the same); a file holds it, a newline,
  // then the data.
  Status Exchange(const std::string& call, const std::string& mine, std::vector<std::string>* all) {
    const int n = call_++;
    const std::string base = dir_ + "/" + id_ + "." + std::to_string(n) + ".";
    const std::string tmp = base + std::to_string(rank_) + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary);
      f << call << '\n';
      f.write(mine.data(), static_cast<std::streamsize>(mine.size()));
      if (!f) return Internal(call + ": cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), (base + std::to_string(rank_)).c_str()) != 0) {
      return Internal(call + ": cannot rename " + tmp);
    }
    all->assign(size_, std::string());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (int p = 0; p < size_; ++p) {
      const std::string path = base + std::to_string(p);
      while (access(path.c_str(), F_OK) != 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          return DeadlineExceeded("call " + std::to_string(n) + " (" + call + "): rank " +
                                  std::to_string(p) + " never wrote " + path);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      std::ifstream f(path, std::ios::binary);
      std::string theirs;
      std::getline(f, theirs);
      if (theirs != call) {
        return Internal("call " + std::to_string(n) + ": rank " + std::to_string(p) + " called '" +
                        theirs + "', rank " + std::to_string(rank_) + " '" + call + "'");
      }
      (*all)[p].assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    return Status::OK();
  }

  const std::string dir_;
  const std::string id_;
  const int rank_;
  const int size_;
  int call_ = 0;
};

}  // namespace hvd::testing
