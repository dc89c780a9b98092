// lmcore/model/reference.h — plain scalar twins of the layers in layers.h, for the tests. They share no
// code with the optimised path: one loop per formula, accumulating in f64, single-threaded. Same
// shapes and the same add-into conventions as layers.h.
#pragma once

#include <cstdint>

namespace lmcore::model::reference {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, std::int64_t N, std::int64_t C,
                     float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, std::int64_t N, std::int64_t C);
// Angles computed in f64 from theta (not the f32 table): the reference for RopeTable too.
void rope_forward(float* x, std::int64_t N, std::int64_t T, std::int64_t row_stride, std::int64_t n_heads,
                  std::int64_t head_dim, double theta);
void rope_backward(float* dx, std::int64_t N, std::int64_t T, std::int64_t row_stride, std::int64_t n_heads,
                   std::int64_t head_dim, double theta);
void swiglu_forward(float* out, const float* gu, std::int64_t N, std::int64_t F);
void swiglu_backward(float* dgu, const float* dout, const float* gu, std::int64_t N, std::int64_t F);
void embedding_backward(float* dweight, const float* dout, const std::int32_t* tokens, std::int64_t N, std::int64_t C);

}  // namespace lmcore::model::reference
