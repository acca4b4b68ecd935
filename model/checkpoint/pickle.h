/* A reader of Python pickles (protocols 2-5) that executes nothing (SPEC
 * §20): the opcodes a PyTorch state dict is written with build a tree of
 * values in C. The only globals are the whitelisted ones below; a call of
 * one is recorded, never made (an OrderedDict() becomes an empty dict).
 * Everything else -- any other global, NEWOBJ, INST, OBJ, EXT*, the
 * out-of-band buffers of protocol 5 -- is refused naming the opcode and its
 * byte, as is a malformed stream: nesting past HS_PK_MAX_DEPTH, a memo slot
 * never set or beyond the stream, a length past the end.
 *
 * Time and memory are linear in the stream's length: every value is made
 * by one opcode of at least one byte, memo slots are bounded by the length,
 * and nothing is ever walked recursively. */
#ifndef HS_PICKLE_H
#define HS_PICKLE_H

#include <stddef.h>
#include <stdint.h>

enum { HS_PK_MAX_DEPTH = 64 };

typedef enum {
    HS_PK_NONE,
    HS_PK_BOOL,
    HS_PK_INT,    /* fits int64 */
    HS_PK_BIGINT, /* an integer beyond int64: its bytes (little-endian two's complement) */
    HS_PK_FLOAT,
    HS_PK_STR,    /* unicode or byte string: its bytes as written */
    HS_PK_TUPLE,
    HS_PK_LIST,
    HS_PK_DICT,   /* items as key, value, key, value ... */
    HS_PK_GLOBAL, /* one of hs_pk_global */
    HS_PK_CALL,   /* a rebuild function applied to a tuple: recorded, not made */
    HS_PK_PERSID  /* a persistent id (BINPERSID): what the loader resolves */
} hs_pk_kind;

/* The globals a state dict may name: collections.OrderedDict,
 * torch._utils._rebuild_tensor_v2 and _rebuild_parameter, and the storage
 * classes torch.{Float,Half,BFloat16,Double,Long,Int,Byte,Bool}Storage. */
typedef enum {
    HS_PK_ORDERED_DICT,
    HS_PK_REBUILD_TENSOR_V2,
    HS_PK_REBUILD_PARAMETER,
    HS_PK_FLOAT_STORAGE,
    HS_PK_HALF_STORAGE,
    HS_PK_BFLOAT16_STORAGE,
    HS_PK_DOUBLE_STORAGE,
    HS_PK_LONG_STORAGE,
    HS_PK_INT_STORAGE,
    HS_PK_BYTE_STORAGE,
    HS_PK_BOOL_STORAGE
} hs_pk_global;

/* The global's Python name ("torch.FloatStorage"). */
const char *hs_pk_global_name(hs_pk_global g);

typedef struct hs_pk hs_pk;
struct hs_pk {
    hs_pk_kind kind;
    int depth;   /* containers nested in this value, itself included */
    int ordered; /* a DICT made by OrderedDict(): BUILD may set its attributes */
    int64_t i;   /* BOOL, INT */
    double f;    /* FLOAT */
    const unsigned char *bytes; /* STR, BIGINT: in the stream */
    size_t len;
    hs_pk **item; /* TUPLE, LIST, DICT */
    size_t n, cap;
    hs_pk_global global; /* GLOBAL, CALL: the function */
    hs_pk *args;         /* CALL: its argument tuple; PERSID: the id */
};

/* The values of one or more pickles (freed together). */
typedef struct {
    hs_pk **all;
    size_t n, cap;
} hs_pickle;

/* Reads the pickle at buf (at most len bytes) up to its STOP: *out gets the
 * value on top of the stack, *used the bytes read. what names the stream in
 * messages ("DIR/pytorch_model.bin: archive/data.pkl"). HS_EFORMAT with the
 * message naming the opcode and its offset; the values made stay in pk
 * until hs_pickle_free either way. */
int hs_pickle_read(hs_pickle *pk, const unsigned char *buf, size_t len, const char *what,
                   hs_pk **out, size_t *used);
void hs_pickle_free(hs_pickle *pk);

/* The value's kind for messages ("a list", "an integer"). */
const char *hs_pk_kind_name(const hs_pk *v);

#endif
