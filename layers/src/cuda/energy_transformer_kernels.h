// The Energy Transformer's kernels on the device (internal to
// layers/src/cuda/energy_transformer.cc). Tokens are the columns of a D x T
// matrix (T = N tokens per sample x the samples of the block, sample by
// sample); launchers enqueue on `stream`. Instantiated for float and double.
#pragma once

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace implicit {
namespace cuda {
namespace internal {

// Per token t: mean, s_t = sqrt(var + eps) (population variance), xhat =
// (x - mean) / s_t, g = gamma xhat + delta.
template <typename S>
void EtLayerNorm(cudaStream_t stream, const S* x, int D, int T, S gamma, S delta, S eps, S* xhat, S* s, S* g);

// Softmax over rows of every column of `count` N x N blocks (in place), with
// the diagonal excluded when exclude_self; lse[j] = log-sum-exp of column j.
template <typename S>
void EtAttentionSoftmax(cudaStream_t stream, S* scores, int N, int blocks, bool exclude_self, S* lse);

// Fused attention of one (head, sample) pair per thread block, in shared
// memory, when the pair's blocks fit (EtFusedAttentionFits): K, Q (HY x T,
// head h's rows hY..hY+Y-1, sample s's columns sN..sN+N-1) give
//   forward: P = softmax(beta K_h^T Q_h) per column (diagonal excluded when
//            exclude_self), stored as the N x N block (h count + s) of p, its
//            log-sum-exps in lse, and qpt_h = Q_h P^T, kp_h = K_h P;
//   HVP:     along dK, dQ: dA = dK_h^T Q_h + K_h^T dQ_h, dP = J_softmax(P) dA,
//            ks_h = dQ_h P^T + beta Q_h dP^T, qs_h = dK_h P + beta K_h dP.
// The same results as the strided-batched GEMMs per head with
// EtAttentionSoftmax and SoftmaxJacobianTranspose, in one launch each.
bool EtFusedAttentionFits(int N, int Y, int scalar_bytes);
template <typename S>
void EtAttentionForward(cudaStream_t stream, const S* k, const S* q, int N, int Y, int H, int count, S beta,
                        bool exclude_self, S* p, S* lse, S* qpt, S* kp);
template <typename S>
void EtAttentionHvp(cudaStream_t stream, const S* k, const S* q, const S* dk, const S* dq, const S* p, int N, int Y,
                    int H, int count, S beta, S* ks, S* qs);

// R = ReLU(S) (M x T).
template <typename S>
void EtRelu(cudaStream_t stream, const S* scores, long long size, S* r);

// y = m .* x + (1 - m) .* c for the n x count block (x compact; m and c full
// n x B, their columns picked by `columns`, null = 0..count-1).
template <typename S>
void EtMerge(cudaStream_t stream, const S* x, const S* mask, const S* values, int n, const int* columns, int count,
             S* y);

// out = y - a (y + dFdG), then, with a clamp, out = m .* out + (1 - m) .* c.
template <typename S>
void EtUpdate(cudaStream_t stream, const S* y, const S* dfdg, S step, const S* mask, const S* values, int n,
              const int* columns, int count, S* out);

// Per sample b (N tokens of D, H heads, M memories):
//   E_b = -D gamma eps sum_t 1/s_t - (1/beta) sum_{h,c} lse_att[(h count + b) N + c]
//         + memory term: relu  -0.5 sum R^2 over b's M x N block,
//                        softmax  -(1/memory_beta) sum_t lse_mem[b N + t]
struct EtEnergyTerms {
  int N = 0, D = 0, H = 0, M = 0, count = 0;
  double gamma = 1, eps = 0, beta = 1, memory_beta = 1;
  bool relu_memory = true;
};
template <typename S>
void EtEnergy(cudaStream_t stream, const EtEnergyTerms& terms, const S* s, const S* lse_att, const S* r,
              const S* lse_mem, S* energy);

// out_t = (gamma / s_t) (v_t - mean(v_t) - xhat_t (xhat_t . v_t) / D) per
// token: the LayerNorm Jacobian M (symmetric) applied to v.
template <typename S>
void EtLayerNormJacobian(cudaStream_t stream, const S* xhat, const S* s, S gamma, const S* v, int D, int T, S* out);

// ds = (r > 0) .* ds (ReLU's derivative at the scores, r = ReLU(scores)).
template <typename S>
void EtReluDerivative(cudaStream_t stream, const S* r, long long size, S* ds);

// w = m .* u (m picked by `columns`; n x count).
template <typename S>
void EtMaskColumns(cudaStream_t stream, const S* u, const S* mask, int n, const int* columns, int count, S* w);

// v = w - a (mh + w); out = m .* v when a mask is given (J^T u), or, with the
// mask and u, out = (1 - m) .* (v + u) (the product with the clamped values).
template <typename S>
void EtVjpCombine(cudaStream_t stream, const S* w, const S* mh, S step, const S* mask, int n, const int* columns,
                  int count, const S* u, S* out);

// energy[j] += 0.5 |(1 - m) .* (x_j - c)|^2 (ClampedEnergy's term; x compact,
// m and c full n x B picked by `columns`).
template <typename S>
void EtClampPenalty(cudaStream_t stream, const S* x, const S* mask, const S* values, int n, const int* columns,
                    int count, S* energy);

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
