build-san/tests/test_data: tests/test_data.c src/base/common.h \
 src/io/data.h tests/testlib.h
src/base/common.h:
src/io/data.h:
tests/testlib.h:
