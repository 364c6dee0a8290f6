build-san/tests/test_sched: tests/test_sched.c src/parallel/sched.h \
 src/base/common.h tests/testlib.h
src/parallel/sched.h:
src/base/common.h:
tests/testlib.h:
