/* Internal to src/store/near*.c: the store's sessions as near-reuse reads them. */
#ifndef SKV_STORE_NEAR_INT_H
#define SKV_STORE_NEAR_INT_H

#include "store/near.h"
#include "store/store_int.h"

typedef struct near_set {
    char **names;    /* [n] owned */
    near_seq *seqs;  /* [n] views of toks[i], surs[i] */
    int32_t **toks;  /* [n] owned */
    float **surs;    /* [n] owned */
    size_t n, cap;
} near_set;

/* Every session's name, tokens and surprisals, from one read snapshot. */
int near_set_load(skv_store *st, near_set *s);
void near_set_free(near_set *s);
/* Adds one near get to the store's counter record (a write transaction). */
int near_stats_add(skv_store *st, const skv_store_near_report *r);

#endif
