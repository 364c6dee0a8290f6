build-san/obj/model/model.o: src/model/model.c src/model/model_internal.h \
 src/model/model.h src/comm/comm.h src/base/common.h src/base/dtype.h \
 src/comm/launch.h src/compute/backend.h src/base/checked.h \
 src/compute/mempool.h src/model/model_config.h src/model/params.h
src/model/model_internal.h:
src/model/model.h:
src/comm/comm.h:
src/base/common.h:
src/base/dtype.h:
src/comm/launch.h:
src/compute/backend.h:
src/base/checked.h:
src/compute/mempool.h:
src/model/model_config.h:
src/model/params.h:
