build-san/obj/config/config_parse.o: src/config/config_parse.c \
 src/base/yaml_limit.h src/config/config_diag_internal.h \
 src/config/config_keys_internal.h src/config/config.h src/base/common.h \
 src/base/dtype.h src/comm/comm.h src/comm/launch.h src/compute/backend.h \
 src/base/checked.h src/model/model.h src/compute/mempool.h \
 src/model/model_config.h src/model/params.h src/parallel/optim.h \
 src/parallel/zero.h src/parallel/sched.h \
 src/config/config_rules_internal.h src/config/config_values_internal.h
src/base/yaml_limit.h:
src/config/config_diag_internal.h:
src/config/config_keys_internal.h:
src/config/config.h:
src/base/common.h:
src/base/dtype.h:
src/comm/comm.h:
src/comm/launch.h:
src/compute/backend.h:
src/base/checked.h:
src/model/model.h:
src/compute/mempool.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
src/config/config_rules_internal.h:
src/config/config_values_internal.h:
