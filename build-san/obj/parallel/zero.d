build-san/obj/parallel/zero.o: src/parallel/zero.c \
 src/parallel/zero_internal.h src/parallel/zero.h src/comm/comm.h \
 src/base/common.h src/base/dtype.h src/comm/launch.h \
 src/compute/mempool.h src/compute/backend.h src/base/checked.h \
 src/model/model.h src/model/model_config.h src/model/params.h \
 src/base/bf16.h
src/parallel/zero_internal.h:
src/parallel/zero.h:
src/comm/comm.h:
src/base/common.h:
src/base/dtype.h:
src/comm/launch.h:
src/compute/mempool.h:
src/compute/backend.h:
src/base/checked.h:
src/model/model.h:
src/model/model_config.h:
src/model/params.h:
src/base/bf16.h:
