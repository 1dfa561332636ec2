// Status values returned across the cliffguard public API. No exception or abort
// crosses the library boundary: every fallible call returns Status or StatusOr<T>.
// Messages name the operation, the offending value and the rule it broke.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace cliffguard {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,    // a caller-supplied value breaks a documented rule
  kNotFound,           // a named thing (file, variant, key) does not exist
  kUnimplemented,      // a kernel variant declines this shape or host
  kInvalidState,       // call made in the wrong state (e.g. plan not ready)
  kDataLoss,           // a file is truncated, corrupt or fails verification
  kFailedPrecondition, // e.g. bundle schema newer than this build, device mismatch
  kIoError,            // the operating system refused a read or write
  kOutOfRange,         // a parameter value lies outside its declared range
  kInternal,           // a bug in cliffguard
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: gemm: m=0 must be >= 1"
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status InvalidState(std::string m) { return {StatusCode::kInvalidState, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}                // NOLINT(runtime/explicit)
  StatusOr(Status status) : v_(std::move(status)) {          // NOLINT(runtime/explicit)
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "StatusOr built from OK status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  // Precondition: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace cliffguard

#define CG_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    ::cliffguard::Status cg_status_ = (expr);    \
    if (!cg_status_.ok()) return cg_status_;     \
  } while (0)

#define CG_CONCAT_INNER_(a, b) a##b
#define CG_CONCAT_(a, b) CG_CONCAT_INNER_(a, b)
#define CG_ASSIGN_OR_RETURN(lhs, expr) CG_ASSIGN_OR_RETURN_IMPL_(CG_CONCAT_(cg_sor_, __LINE__), lhs, expr)
#define CG_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
