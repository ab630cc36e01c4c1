// The C ABI podc calls gloo through (built by build.rs as its own shared library, so that
// podc starts where libgloo is missing; see src/distributed/gloo.rs).
//
// Every entry point catches every C++ exception (gloo throws IoException, TimeoutException
// and EnforceNotMet) and returns it as a message: an exception that reached Rust would
// abort the process. Rendezvous goes through podc's coordinator (a gloo Store whose set and
// get call back into Rust); the data path is gloo's TCP transport.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

extern "C" {
// Appends bytes to a value being read.
typedef void (*podc_sink_fn)(void* sink, const uint8_t* data, size_t len);
// 0: stored.
typedef int32_t (*podc_set_fn)(void* ud, const uint8_t* key, size_t klen, const uint8_t* val, size_t vlen);
// Blocks until the key exists (0), or fails (nonzero) after timeout_ms.
typedef int32_t (*podc_get_fn)(void* ud, const uint8_t* key, size_t klen, int64_t timeout_ms, void* sink,
                               podc_sink_fn sink_fn);
}

namespace {

void set_err(char* err, size_t errlen, const std::string& msg) {
  if (err && errlen) {
    size_t n = std::min(errlen - 1, msg.size());
    memcpy(err, msg.data(), n);
    err[n] = 0;
  }
}

void append(void* sink, const uint8_t* data, size_t len) {
  auto* v = static_cast<std::vector<char>*>(sink);
  v->insert(v->end(), data, data + len);
}

// A gloo Store over podc's coordinator.
class CoordinatorStore : public gloo::rendezvous::Store {
 public:
  CoordinatorStore(void* ud, podc_set_fn set, podc_get_fn get, std::chrono::milliseconds timeout)
      : ud_(ud), set_(set), get_(get), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    if (set_(ud_, bytes(key), key.size(), reinterpret_cast<const uint8_t*>(data.data()), data.size()) != 0)
      throw std::runtime_error("the coordinator did not store `" + key + "`");
  }
  std::vector<char> get(const std::string& key) override { return get(key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) get(k, timeout);
  }

 private:
  static const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) {
    std::vector<char> out;
    if (get_(ud_, bytes(key), key.size(), timeout.count(), &out, append) != 0)
      throw std::runtime_error("no `" + key + "` from the coordinator");
    return out;
  }
  void* ud_;
  podc_set_fn set_;
  podc_get_fn get_;
  std::chrono::milliseconds timeout_;
};

template <typename T>
void allreduce_sum(const std::shared_ptr<gloo::Context>& ctx, void* data, size_t n, uint32_t tag) {
  gloo::AllreduceOptions opts(ctx);
  opts.setInput(static_cast<T*>(data), n);
  opts.setOutput(static_cast<T*>(data), n);
  opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
  opts.setTag(tag);
  gloo::allreduce(opts);
}

}  // namespace

// One group of processes. Collectives on a group are serialised by its mutex; every
// process must issue the same collectives in the same order.
struct podc_gloo {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::mutex mu;
  uint32_t tag = 0;
};

extern "C" {

// Joins group `prefix` as `rank` of `size`, listening on `hostname` (an address the other
// processes can reach). Null on failure, with the reason in `err`.
podc_gloo* podc_gloo_connect(int32_t rank, int32_t size, const char* hostname, const char* prefix, void* ud,
                             podc_set_fn set, podc_get_fn get, int64_t timeout_ms, char* err, size_t errlen) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto timeout = std::chrono::milliseconds(timeout_ms);
    CoordinatorStore coordinator(ud, set, get, timeout);
    // connectFullMesh writes fixed key names: a prefix per group keeps groups apart.
    gloo::rendezvous::PrefixStore store(prefix, coordinator);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(timeout);
    ctx->connectFullMesh(store, device);
    auto* g = new podc_gloo;
    g->ctx = std::move(ctx);
    return g;
  } catch (const std::exception& e) {
    set_err(err, errlen, e.what());
  } catch (...) {
    set_err(err, errlen, "an unknown C++ exception");
  }
  return nullptr;
}

// Sums `n` elements at `data` over the group, in place. dtype: 0 f32, 1 i32, 2 u32.
// 0 on success.
int32_t podc_gloo_allreduce_sum(podc_gloo* g, int32_t dtype, void* data, size_t n, char* err, size_t errlen) {
  try {
    std::lock_guard<std::mutex> lock(g->mu);
    uint32_t tag = g->tag++;
    switch (dtype) {
      case 0: allreduce_sum<float>(g->ctx, data, n, tag); break;
      case 1: allreduce_sum<int32_t>(g->ctx, data, n, tag); break;
      case 2: allreduce_sum<uint32_t>(g->ctx, data, n, tag); break;
      default: throw std::runtime_error("an all-reduce of an unsupported dtype");
    }
    return 0;
  } catch (const std::exception& e) {
    set_err(err, errlen, e.what());
  } catch (...) {
    set_err(err, errlen, "an unknown C++ exception");
  }
  return -1;
}

void podc_gloo_destroy(podc_gloo* g) {
  try {
    delete g;
  } catch (...) {
  }
}

}  // extern "C"
