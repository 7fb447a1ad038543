// The machinery of op_harness.h: values, the 2x rule, running a case on a backend, finite
// differences. The cases themselves: op_cases.cpp (kernels/ops.h) and attn_cases.cpp (attention).
#include "ops/op_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace seqpar::optest {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- values -----------------------------------------------------------------------------------

std::vector<float> random_values(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) {
    do {
      x = u(rng);
    } while (x == 0.f);
  }
  return v;
}

float round_bf16(double x) { return bf16_to_f32(f32_to_bf16(static_cast<float>(x))); }

float round_to(double x, DType dt) {
  if (dt == DType::kBF16) return round_bf16(x);
  if (dt == DType::kF16) return f16_to_f32(f32_to_f16(static_cast<float>(x)));
  return static_cast<float>(x);
}

std::vector<float> stored(const std::vector<float>& v, DType dt) {
  if (dt != DType::kBF16 && dt != DType::kF16) return v;
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = round_to(v[i], dt);
  return out;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

Tensor poisoned(const Shape& shape, DType dt, Device device) {
  Tensor h = Tensor::empty(shape, dt);
  if (h.nbytes() > 0) std::memset(h.raw(), 0xFF, h.nbytes());
  return device.is_cpu() ? h : h.to(device);
}

Tensor make_tensor(const Shape& shape, const std::vector<float>& v, DType dt, Device device) {
  Tensor h = Tensor::from_vector<float>(shape, v);
  if (dt == DType::kBF16 || dt == DType::kF16) h = h.to_dtype(dt);
  return device.is_cpu() ? h : h.to(device);
}

std::vector<double> values_of(const Tensor& t) { return to_double(t.to_f32_vector()); }

// ---- the rule ---------------------------------------------------------------------------------

ErrStats error_vs(const std::vector<double>& got, const std::vector<double>& ref) {
  ErrStats e;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    if (!std::isfinite(got[i]) && e.first_bad < 0) e.first_bad = static_cast<int64_t>(i);
    const double d = got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& ref) {
  const ErrStats e = error_vs(got, ref);
  return e.first_bad >= 0 ? kInf : e.rel_l2;
}

void expect_within_2x(const std::string& what, const std::vector<double>& got, const std::vector<double>& same_dtype,
                      const std::vector<double>& ref, const Rule& rule) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  ASSERT_EQ(same_dtype.size(), ref.size()) << what;
  const ErrStats g = error_vs(got, ref), b = error_vs(same_dtype, ref);
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  EXPECT_LT(g.first_bad, 0) << what << ": element " << g.first_bad << " is not finite ("
                            << (g.first_bad >= 0 ? got[g.first_bad] : 0.0) << "): unwritten (poison) or overflow";
  ASSERT_LT(b.first_bad, 0) << what << ": the same-dtype baseline has a non-finite element";
  // The baseline must itself be close to the reference, or the rule proves nothing.
  EXPECT_LT(b.rel_l2, 0.02) << what << ": same-dtype baseline vs reference " << b.rel_l2;
  if (rule.max_abs) {
    EXPECT_LE(g.max_abs, 2 * b.max_abs + rule.floor_rel * scale)
        << what << ": max |path - ref| = " << g.max_abs << ", max |same dtype - ref| = " << b.max_abs;
  }
  EXPECT_LE(g.first_bad >= 0 ? kInf : g.rel_l2, 2 * b.rel_l2 + rule.floor_rel)
      << what << ": rel L2 path " << g.rel_l2 << ", same dtype " << b.rel_l2;
}

void expect_lse(const std::string& what, const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = want[i] == -kInf
                        ? got[i] == -kInf
                        : std::isfinite(got[i]) && std::abs(got[i] - want[i]) <= tol + 1e-5 * std::abs(want[i]);
    if (!ok && bad++ < 5) ADD_FAILURE() << what << ": lse[" << i << "] = " << got[i] << ", expected " << want[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

// ---- ops on a backend -----------------------------------------------------------------------------

Backend cpu_backend() { return Backend{"cpu-f32", Device::cpu(), DType::kF32, {}, ""}; }

DType dtype_on(const Operand& o, const Backend& b) {
  switch (o.store) {
    case Store::kCompute:
      return b.compute;
    case Store::kF32:
      return DType::kF32;
    case Store::kBF16:
      return b.device.is_cpu() ? DType::kF32 : DType::kBF16;
    case Store::kI32:
      return DType::kI32;
  }
  return DType::kF32;
}

namespace {

Values initial_values(const OpCase& c) {
  Values v;
  for (const Operand& o : c.operands) {
    if (o.store == Store::kI32) {
      v[o.name] = std::vector<double>(o.ints.begin(), o.ints.end());
    } else if (o.role == Role::kOut) {
      v[o.name] = std::vector<double>(static_cast<size_t>(shape_numel(o.shape)), 0.0);
    } else {
      v[o.name] = to_double(o.values);
    }
  }
  return v;
}

Values reference_of(const OpCase& c, Values v) {
  c.reference(v);
  return v;
}

// What the same-dtype computation gives on `b`: the CPU f32 run on inputs stored as `b` stores
// them, outputs rounded the same way; for the CPU itself, the reference rounded to f32.
Values same_dtype_baseline(const OpCase& c, const Backend& b, const Values& ref) {
  Values base;
  if (b.device.is_cpu()) {
    for (const auto& [name, v] : ref) {
      std::vector<double>& out = base[name];
      for (double x : v) out.push_back(static_cast<float>(x));
    }
    return base;
  }
  OpCase stored_case = c;
  for (Operand& o : stored_case.operands)
    if (o.store != Store::kI32) o.values = stored(o.values, dtype_on(o, b));
  base = run_op(stored_case, cpu_backend());
  for (const Operand& o : c.operands) {
    const DType dt = o.store == Store::kI32 ? DType::kI32 : dtype_on(o, b);
    if (dt != DType::kBF16 && dt != DType::kF16) continue;
    for (double& x : base[o.name]) x = round_to(x, dt);
  }
  return base;
}

}  // namespace

Values run_op(const OpCase& c, const Backend& b) {
  Tensors t;
  for (const Operand& o : c.operands) {
    const Device dev = o.on_host ? Device::cpu() : b.device;
    if (o.store == Store::kI32) {
      Tensor h = Tensor::from_vector<int32_t>(o.shape, o.ints);
      t.emplace(o.name, dev.is_cpu() ? h : h.to(dev));
    } else if (o.role == Role::kOut) {
      t.emplace(o.name, poisoned(o.shape, dtype_on(o, b), dev));
    } else {
      t.emplace(o.name, make_tensor(o.shape, o.values, dtype_on(o, b), dev));
    }
  }
  std::map<std::string, double> scalars;
  c.run(t, scalars, b);
  Values v;
  for (const Operand& o : c.operands)
    if (o.store != Store::kI32 && o.role != Role::kIn) v[o.name] = values_of(t.at(o.name));
  for (const auto& [name, x] : scalars) v[name] = {x};
  return v;
}

bool check_op(const OpCase& c, const Backend& b, std::string* skipped) {
  if (c.unsupported || !b.unavailable.empty()) {
    const std::string why = !b.unavailable.empty() ? b.unavailable : c.unsupported(b);
    if (!why.empty()) {
      if (skipped) *skipped = why;
      return false;
    }
  }
  const Values ref = reference_of(c, initial_values(c));
  const Values got = run_op(c, b);
  const Values base = same_dtype_baseline(c, b, ref);
  for (const std::string& name : c.checked) {
    SCOPED_TRACE(c.name + " on " + b.name + ": " + name);
    if (!got.count(name) || !base.count(name) || !ref.count(name)) {
      ADD_FAILURE() << "no output named " << name;
      continue;
    }
    expect_within_2x(c.name + " " + name, got.at(name), base.at(name), ref.at(name), c.rule);
  }
  return true;
}

bool check_op_finite_differences(const OpCase& c) {
  if (c.fd.empty()) return false;
  const Values start = initial_values(c);
  const Values final_v = reference_of(c, start);
  for (const OpCase::Fd& f : c.fd) {
    SCOPED_TRACE(c.name + ": d/d " + f.wrt + " of sum(" + f.upstream + " * " + f.output + ") vs " + f.grad);
    const std::vector<double>& up = start.at(f.upstream);
    std::vector<double> analytic = final_v.at(f.grad);
    if (f.accumulates)
      for (size_t i = 0; i < analytic.size(); ++i) analytic[i] -= start.at(f.grad)[i];
    const size_t n = start.at(f.wrt).size();
    if (analytic.size() != n || n > 4096) {
      ADD_FAILURE() << "finite differences need a gradient shaped like " << f.wrt << ", and a small case (" << n
                    << " elements)";
      continue;
    }
    double worst = 0, scale = 1;
    for (size_t i = 0; i < n; ++i) {
      const double x0 = start.at(f.wrt)[i], eps = 1e-6 * std::max(1.0, std::fabs(x0));
      auto loss_at = [&](double x) {
        Values v = start;
        v[f.wrt][i] = x;
        const Values r = reference_of(c, v);
        double s = 0;
        for (size_t j = 0; j < up.size(); ++j) s += up[j] * r.at(f.output)[j];
        return s;
      };
      const double numeric = (loss_at(x0 + eps) - loss_at(x0 - eps)) / (2 * eps);
      worst = std::max(worst, std::fabs(numeric - analytic[i]));
      scale = std::max(scale, std::fabs(analytic[i]));
    }
    EXPECT_LT(worst / scale, 1e-6) << "max |numeric - analytic| = " << worst;
  }
  return true;
}

}  // namespace seqpar::optest
