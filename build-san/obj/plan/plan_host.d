build-san/obj/plan/plan_host.o: src/plan/plan_host.c src/model/model.h \
 src/comm/comm.h src/base/common.h src/base/dtype.h src/comm/launch.h \
 src/compute/backend.h src/base/checked.h src/compute/mempool.h \
 src/model/model_config.h src/model/params.h src/io/llmc.h \
 src/config/config.h src/parallel/optim.h src/parallel/zero.h \
 src/parallel/sched.h src/plan/plan.h
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
src/io/llmc.h:
src/config/config.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
src/plan/plan.h:
