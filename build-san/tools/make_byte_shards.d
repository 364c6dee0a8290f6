build-san/tools/make_byte_shards: scripts/make_byte_shards.c \
 src/base/common.h src/io/data.h
src/base/common.h:
src/io/data.h:
