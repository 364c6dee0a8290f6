build-san/obj/app/commtest.o: src/app/commtest.c src/app/commtest.h \
 src/compute/backend.h src/base/checked.h src/base/common.h \
 src/base/dtype.h src/compute/backend_select.h src/base/bf16.h \
 src/comm/comm.h src/comm/launch.h src/app/commtest_internal.h \
 src/comm/mesh.h src/config/config.h src/model/model.h \
 src/compute/mempool.h src/model/model_config.h src/model/params.h \
 src/parallel/optim.h src/parallel/zero.h src/parallel/sched.h
src/app/commtest.h:
src/compute/backend.h:
src/base/checked.h:
src/base/common.h:
src/base/dtype.h:
src/compute/backend_select.h:
src/base/bf16.h:
src/comm/comm.h:
src/comm/launch.h:
src/app/commtest_internal.h:
src/comm/mesh.h:
src/config/config.h:
src/model/model.h:
src/compute/mempool.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
