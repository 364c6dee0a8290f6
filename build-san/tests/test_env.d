build-san/tests/test_env: tests/test_env.c src/base/env.h tests/testlib.h
src/base/env.h:
tests/testlib.h:
