#include "kernels/cuda/cublas_api.h"

#include <dlfcn.h>

#include <mutex>

#include <fmt/format.h>

namespace cliffguard::cuda {
namespace {

struct Loaded {
  CublasApi api;
  std::string error;  // empty when loaded
};

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn& fn, std::string& error) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  if (!fn) error = fmt::format("symbol {} not found in cuBLAS", name);
  return fn != nullptr;
}

Loaded LoadOnce() {
  Loaded l;
  const std::string blas_name = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
  const std::string lt_name = fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR);
  void* lt = ::dlopen(lt_name.c_str(), RTLD_NOW | RTLD_LOCAL);
  void* blas = lt ? ::dlopen(blas_name.c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (!lt || !blas) {
    const char* why = ::dlerror();
    l.error = fmt::format("cannot load {}: {}", lt ? blas_name : lt_name, why ? why : "not found");
    return l;
  }
  bool ok = true;
#define CG_RESOLVE_BLAS(name) ok = ok && Resolve(blas, #name, l.api.name, l.error);
#define CG_RESOLVE_LT(name) ok = ok && Resolve(lt, #name, l.api.name, l.error);
  CG_CUBLAS_FUNCTIONS(CG_RESOLVE_BLAS)
  CG_CUBLASLT_FUNCTIONS(CG_RESOLVE_LT)
#undef CG_RESOLVE_BLAS
#undef CG_RESOLVE_LT
  return l;
}

}  // namespace

const CublasApi* LoadCublas(std::string* error) {
  static const Loaded* loaded = new Loaded(LoadOnce());  // never unloaded: handles may outlive main
  if (!loaded->error.empty()) {
    if (error) *error = loaded->error;
    return nullptr;
  }
  return &loaded->api;
}

}  // namespace cliffguard::cuda
