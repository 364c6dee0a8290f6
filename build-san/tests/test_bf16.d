build-san/tests/test_bf16: tests/test_bf16.c src/base/bf16.h \
 tests/testlib.h
src/base/bf16.h:
tests/testlib.h:
