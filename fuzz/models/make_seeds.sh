#!/bin/sh
# Rewrites the fuzzing model (fuzz/models/tiny.gguf) and the seeds tied to its fingerprint:
# fuzz/corpus/session/tiny_* (every codec's files, written by fuzz/fuzz_session.c itself
# with FUZZ_SESSION_SEEDS) and fuzz/corpus/store/rec_* (one per record of the store
# fuzz/fuzz_store.c makes, FUZZ_STORE_SEEDS). Run from the repository root after changing
# the model or a harness's seed list; the other corpus files are kept (a mutated input
# means what it means under any model: a record index, a mode, bytes). The store seeds of
# the state and session records hold measured speeds and put times, so each run differs
# there.
set -e
/usr/bin/python3 fuzz/models/make_fuzz_model.py
make -s build/tests/test_fuzz_session build/tests/test_fuzz_store
rm -f fuzz/corpus/session/tiny_* fuzz/corpus/store/rec_*
FUZZ_SESSION_SEEDS=fuzz/corpus/session build/tests/test_fuzz_session
FUZZ_STORE_SEEDS=fuzz/corpus/store build/tests/test_fuzz_store
