build-san/obj/parallel/optim.o: src/parallel/optim.c src/parallel/optim.h \
 src/compute/mempool.h src/compute/backend.h src/base/checked.h \
 src/base/common.h src/base/dtype.h src/parallel/zero.h src/comm/comm.h \
 src/comm/launch.h src/model/model.h src/model/model_config.h \
 src/model/params.h
src/parallel/optim.h:
src/compute/mempool.h:
src/compute/backend.h:
src/base/checked.h:
src/base/common.h:
src/base/dtype.h:
src/parallel/zero.h:
src/comm/comm.h:
src/comm/launch.h:
src/model/model.h:
src/model/model_config.h:
src/model/params.h:
