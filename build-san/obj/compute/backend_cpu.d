build-san/obj/compute/backend_cpu.o: src/compute/backend_cpu.c \
 src/compute/backend_cpu_internal.h src/compute/backend.h \
 src/base/checked.h src/base/common.h src/base/dtype.h \
 /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h \
 /usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h \
 src/base/bf16.h src/base/env.h
src/compute/backend_cpu_internal.h:
src/compute/backend.h:
src/base/checked.h:
src/base/common.h:
src/base/dtype.h:
/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h:
/usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h:
src/base/bf16.h:
src/base/env.h:
