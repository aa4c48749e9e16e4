/* What the model's files (model.c, model_gguf.c, model_l2c.c, model_weights.c,
 * model_fp.c) share: the loaders' common checks and the per-layer tensor table's
 * accessors (arch.h describes each field once). Private to src/engine/. */
#ifndef SKV_MODEL_INT_H
#define SKV_MODEL_INT_H

#include "engine/model.h"
#include "core/util.h"

#define MAX_DIM (1 << 20) /* widest width or feed-forward size a file may declare */

/* ---- model.c ---- */
int skv_model_check_hparams(const skv_model_info *h, skv_err *err);
/* freq[i] = base^(-2i/rope_dim) / factor[i] for the rope_dim/2 pairs (factors optional). */
double *skv_model_rope_freqs(const skv_model *m, float base, const float *freq_factors);
int skv_model_init_rope(skv_model *m, const float *freq_factors, skv_err *err);
/* An f32 copy of a vector tensor (norm weights): the forward pass reads them often. */
float *skv_weight_vector_copy(const skv_weight *w, skv_err *err, int *rc);
/* What every architecture row starts from: llama's attention scale and nothing else. */
void skv_model_arch_defaults(skv_model *m);
/* Layer L's field of tensor d: the matrix view, the vector's f32 copy (arch.h offsetof). */
skv_weight *skv_layer_matrix(skv_layer *L, const skv_tensor_desc *d);
float **skv_layer_vector(skv_layer *L, const skv_tensor_desc *d);
const void *skv_layer_cfield(const skv_layer *L, const skv_tensor_desc *d);
int skv_tensor_is_vector(const skv_tensor_desc *d);
/* Stores w (a view of tensor t of layer L) in its field: matrices as the view, vectors
 * as an f32 copy of their k values. */
int skv_layer_store(skv_layer *L, skv_layer_tensor t, const skv_weight *w, skv_err *err);
/* Tensor t of layer L is present (an optional one the file lacked is not). */
int skv_layer_has(const skv_layer *L, skv_layer_tensor t);

/* ---- the loaders: model_gguf.c, model_l2c.c ---- */
int skv_model_load_gguf(skv_model *m, const char *path, const skv_model_params *p, skv_err *err);
int skv_model_load_l2c(skv_model *m, const char *path, const char *tok_path, skv_err *err);

/* ---- model_weights.c ---- */
/* Gives the file's pages of p[0..n) back (whole pages inside only): they read back from
 * the file if touched again. */
void skv_weight_drop_pages(const uint8_t *p, size_t n);
void skv_model_repack_weights(skv_model *m);
void skv_model_resident_weights(skv_model *m);

#endif
