// A tiny little-endian binary encoding for the runtime's own messages: negotiation requests and
// responses (runtime/negotiation/message.cc) and the hvd:// rendezvous protocol (base/kv_protocol.h),
// which hvd-launcherd speaks too. The runtime deliberately has no protobuf dependency: it must
// load into processes that carry their own protobuf version.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/status.h"

namespace hvd::base {

class Encoder {
 public:
  void U8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void I32(int32_t v) { Raw(&v, sizeof v); }
  void U64(uint64_t v) { Raw(&v, sizeof v); }
  void I64(int64_t v) { Raw(&v, sizeof v); }
  void F64(double v) { Raw(&v, sizeof v); }
  void Str(std::string_view s) {
    U64(s.size());
    buf_.append(s.data(), s.size());
  }
  void I64Vec(const std::vector<int64_t>& v) {
    U64(v.size());
    for (int64_t x : v) I64(x);
  }
  const std::string& data() const { return buf_; }
  std::string Release() { return std::move(buf_); }

 private:
  void Raw(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  std::string buf_;
};

// Reads what Encoder wrote. Every read is bounds-checked; after a failed read all further reads
// fail and status() says where the message was short or malformed.
class Decoder {
 public:
  explicit Decoder(std::string_view data) : data_(data) {}

  bool U8(uint8_t* v) { return Raw(v, sizeof *v); }
  bool I32(int32_t* v) { return Raw(v, sizeof *v); }
  bool U64(uint64_t* v) { return Raw(v, sizeof *v); }
  bool I64(int64_t* v) { return Raw(v, sizeof *v); }
  bool F64(double* v) { return Raw(v, sizeof *v); }
  bool Str(std::string* s) {
    uint64_t n;
    if (!U64(&n) || n > data_.size() - pos_) return Fail("string length");
    s->assign(data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool I64Vec(std::vector<int64_t>* v) {
    uint64_t n;
    if (!U64(&n) || n > (data_.size() - pos_) / sizeof(int64_t)) return Fail("vector length");
    v->resize(n);
    for (auto& x : *v) I64(&x);
    return ok_;
  }
  // A count of items each at least `min_item_bytes` long; rejects counts the data cannot hold.
  bool Count(uint64_t* n, size_t min_item_bytes) {
    if (!U64(n) || *n > (data_.size() - pos_) / (min_item_bytes ? min_item_bytes : 1)) {
      return Fail("item count");
    }
    return true;
  }

  bool ok() const { return ok_; }
  bool done() const { return pos_ == data_.size(); }
  Status status(std::string_view what) const {
    if (ok_) return Status::OK();
    return Internal("malformed " + std::string(what) + " message: bad " + error_ + " at byte " +
                    std::to_string(pos_) + " of " + std::to_string(data_.size()));
  }

 private:
  bool Raw(void* p, size_t n) {
    if (!ok_ || n > data_.size() - pos_) return Fail("field");
    std::memcpy(p, data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool Fail(const char* what) {
    if (ok_) error_ = what;
    ok_ = false;
    return false;
  }

  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
  std::string error_;
};

}  // namespace hvd::base
