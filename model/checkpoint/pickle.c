#include "pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dtype.h"
#include "memory.h"

static const struct {
    const char *module, *name;
} globals[] = {
    [HS_PK_ORDERED_DICT] = { "collections", "OrderedDict" },
    [HS_PK_REBUILD_TENSOR_V2] = { "torch._utils", "_rebuild_tensor_v2" },
    [HS_PK_REBUILD_PARAMETER] = { "torch._utils", "_rebuild_parameter" },
    [HS_PK_FLOAT_STORAGE] = { "torch", "FloatStorage" },
    [HS_PK_HALF_STORAGE] = { "torch", "HalfStorage" },
    [HS_PK_BFLOAT16_STORAGE] = { "torch", "BFloat16Storage" },
    [HS_PK_DOUBLE_STORAGE] = { "torch", "DoubleStorage" },
    [HS_PK_LONG_STORAGE] = { "torch", "LongStorage" },
    [HS_PK_INT_STORAGE] = { "torch", "IntStorage" },
    [HS_PK_BYTE_STORAGE] = { "torch", "ByteStorage" },
    [HS_PK_BOOL_STORAGE] = { "torch", "BoolStorage" },
};
enum { N_GLOBALS = sizeof globals / sizeof *globals };

const char *hs_pk_global_name(hs_pk_global g)
{
    static char name[N_GLOBALS][48];
    if (!name[g][0])
        snprintf(name[g], sizeof name[g], "%s.%s", globals[g].module, globals[g].name);
    return name[g];
}

/* Every opcode of protocols 0-5 by its byte, for messages: those a state
 * dict needs are read, the rest refused by name. */
static const char *opcode_name(unsigned char op)
{
    static const struct {
        unsigned char op;
        const char *name;
    } ops[] = {
        { '(', "MARK" },           { '.', "STOP" },          { '0', "POP" },
        { '1', "POP_MARK" },       { '2', "DUP" },           { 'F', "FLOAT" },
        { 'I', "INT" },            { 'J', "BININT" },        { 'K', "BININT1" },
        { 'L', "LONG" },           { 'M', "BININT2" },       { 'N', "NONE" },
        { 'P', "PERSID" },         { 'Q', "BINPERSID" },     { 'R', "REDUCE" },
        { 'S', "STRING" },         { 'T', "BINSTRING" },     { 'U', "SHORT_BINSTRING" },
        { 'V', "UNICODE" },        { 'X', "BINUNICODE" },    { 'a', "APPEND" },
        { 'b', "BUILD" },          { 'c', "GLOBAL" },        { 'd', "DICT" },
        { '}', "EMPTY_DICT" },     { 'e', "APPENDS" },       { 'g', "GET" },
        { 'h', "BINGET" },         { 'i', "INST" },          { 'j', "LONG_BINGET" },
        { 'l', "LIST" },           { ']', "EMPTY_LIST" },    { 'o', "OBJ" },
        { 'p', "PUT" },            { 'q', "BINPUT" },        { 'r', "LONG_BINPUT" },
        { 's', "SETITEM" },        { 't', "TUPLE" },         { ')', "EMPTY_TUPLE" },
        { 'u', "SETITEMS" },       { 'G', "BINFLOAT" },      { 0x80, "PROTO" },
        { 0x81, "NEWOBJ" },        { 0x82, "EXT1" },         { 0x83, "EXT2" },
        { 0x84, "EXT4" },          { 0x85, "TUPLE1" },       { 0x86, "TUPLE2" },
        { 0x87, "TUPLE3" },        { 0x88, "NEWTRUE" },      { 0x89, "NEWFALSE" },
        { 0x8a, "LONG1" },         { 0x8b, "LONG4" },        { 'B', "BINBYTES" },
        { 'C', "SHORT_BINBYTES" }, { 0x8c, "SHORT_BINUNICODE" }, { 0x8d, "BINUNICODE8" },
        { 0x8e, "BINBYTES8" },     { 0x8f, "EMPTY_SET" },    { 0x90, "ADDITEMS" },
        { 0x91, "FROZENSET" },     { 0x92, "NEWOBJ_EX" },    { 0x93, "STACK_GLOBAL" },
        { 0x94, "MEMOIZE" },       { 0x95, "FRAME" },        { 0x96, "BYTEARRAY8" },
        { 0x97, "NEXT_BUFFER" },   { 0x98, "READONLY_BUFFER" },
    };
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (ops[i].op == op)
            return ops[i].name;
    return NULL;
}

const char *hs_pk_kind_name(const hs_pk *v)
{
    static const char *names[] = {
        [HS_PK_NONE] = "None",        [HS_PK_BOOL] = "a bool",   [HS_PK_INT] = "an integer",
        [HS_PK_BIGINT] = "an integer", [HS_PK_FLOAT] = "a float", [HS_PK_STR] = "a string",
        [HS_PK_TUPLE] = "a tuple",    [HS_PK_LIST] = "a list",   [HS_PK_DICT] = "a dict",
        [HS_PK_GLOBAL] = "a class or function", [HS_PK_CALL] = "a tensor",
        [HS_PK_PERSID] = "a storage",
    };
    return v ? names[v->kind] : "nothing";
}

/* The machine: the stack (MARK entries are NULL), the marks' positions in
 * it, and the memo. */
typedef struct {
    hs_pickle *pk;
    const unsigned char *buf;
    size_t len, at; /* at: the next byte */
    size_t op_at;   /* the current opcode's byte */
    unsigned char op;
    const char *what;
    hs_pk **stack;
    size_t sp, stack_cap;
    size_t marks[HS_PK_MAX_DEPTH];
    int n_marks;
    hs_pk **memo;
    size_t memo_cap, memo_set;
} machine;

static int refuse(const machine *vm, const char *fmt, const char *detail)
{
    const char *name = opcode_name(vm->op);
    char op[32];
    if (name)
        snprintf(op, sizeof op, "%s", name);
    else
        snprintf(op, sizeof op, "0x%02x", vm->op);
    return hs_fail(HS_EFORMAT, "%s: opcode %s at byte %zu: %s%s", vm->what, op, vm->op_at, fmt,
                   detail ? detail : "");
}

/* Room for one more pointer in *arr (*n used of *cap, doubling from
 * first): 0, or -1 when it cannot grow. */
static int room(hs_pk ***arr, size_t n, size_t *cap, size_t first)
{
    if (n < *cap)
        return 0;
    const size_t c = *cap ? 2 * *cap : first;
    hs_pk **grown = realloc(*arr, c * sizeof *grown);
    if (!grown)
        return -1;
    *arr = grown, *cap = c;
    return 0;
}

static hs_pk *make(machine *vm, hs_pk_kind kind)
{
    hs_pickle *pk = vm->pk;
    hs_pk *v = room(&pk->all, pk->n, &pk->cap, 256) ? NULL : calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->kind = kind;
    v->depth = kind == HS_PK_TUPLE || kind == HS_PK_LIST || kind == HS_PK_DICT;
    pk->all[pk->n++] = v;
    return v;
}

static int push(machine *vm, hs_pk *v)
{
    if (!v || room(&vm->stack, vm->sp, &vm->stack_cap, 64))
        return hs_fail(HS_ENOMEM, "%s: out of memory reading the pickle", vm->what);
    vm->stack[vm->sp++] = v;
    return HS_OK;
}

/* The top value (not a mark); NULL with the message when there is none. */
static hs_pk *pop(machine *vm, int *rc)
{
    const size_t floor = vm->n_marks ? vm->marks[vm->n_marks - 1] : 0;
    if (vm->sp <= floor) {
        *rc = refuse(vm, "the stack is empty", NULL);
        return NULL;
    }
    return vm->stack[--vm->sp];
}

/* Appends child to container c, keeping c's depth. */
static int add(machine *vm, hs_pk *c, hs_pk *child)
{
    if (room(&c->item, c->n, &c->cap, 4))
        return hs_fail(HS_ENOMEM, "%s: out of memory reading the pickle", vm->what);
    c->item[c->n++] = child;
    if (child->depth + 1 > c->depth)
        c->depth = child->depth + 1;
    if (c->depth > HS_PK_MAX_DEPTH) {
        char d[64];
        snprintf(d, sizeof d, "%d levels", HS_PK_MAX_DEPTH);
        return refuse(vm, "containers nested deeper than ", d);
    }
    return HS_OK;
}

/* n bytes of argument; NULL with the message past the end. */
static const unsigned char *take(machine *vm, size_t n, int *rc)
{
    if (n > vm->len - vm->at) {
        *rc = refuse(vm, "its argument runs past the end of the pickle", NULL);
        return NULL;
    }
    const unsigned char *p = vm->buf + vm->at;
    vm->at += n;
    return p;
}

/* The items above the top mark, which is removed: *first their index. */
static int pop_mark(machine *vm, size_t *first)
{
    if (!vm->n_marks)
        return refuse(vm, "no MARK before it", NULL);
    *first = vm->marks[--vm->n_marks];
    return HS_OK;
}

static int memo_put(machine *vm, uint64_t slot)
{
    if (!vm->sp || (vm->n_marks && vm->sp == vm->marks[vm->n_marks - 1]))
        return refuse(vm, "nothing on the stack to remember", NULL);
    if (slot >= vm->len) { /* each slot a pickler fills is one opcode of the stream */
        char d[64];
        snprintf(d, sizeof d, "%llu", (unsigned long long)slot);
        return refuse(vm, "a memo slot beyond the stream's length: ", d);
    }
    if (slot >= vm->memo_cap) {
        size_t cap = vm->memo_cap ? vm->memo_cap : 64;
        while (cap <= slot)
            cap *= 2;
        hs_pk **m = realloc(vm->memo, cap * sizeof *m);
        if (!m)
            return hs_fail(HS_ENOMEM, "%s: out of memory reading the pickle", vm->what);
        memset(m + vm->memo_cap, 0, (cap - vm->memo_cap) * sizeof *m);
        vm->memo = m, vm->memo_cap = cap;
    }
    vm->memo_set += !vm->memo[slot];
    vm->memo[slot] = vm->stack[vm->sp - 1];
    return HS_OK;
}

static int memo_get(machine *vm, uint64_t slot)
{
    if (slot >= vm->memo_cap || !vm->memo[slot]) {
        char d[64];
        snprintf(d, sizeof d, "%llu", (unsigned long long)slot);
        return refuse(vm, "memo slot never set: ", d);
    }
    return push(vm, vm->memo[slot]);
}

/* GLOBAL's and STACK_GLOBAL's module and name: one of the whitelist's, or
 * refused naming it. */
static int global(machine *vm, const unsigned char *mod, size_t ml, const unsigned char *name,
                  size_t nl)
{
    for (int g = 0; g < N_GLOBALS; g++)
        if (ml == strlen(globals[g].module) && !memcmp(mod, globals[g].module, ml) &&
            nl == strlen(globals[g].name) && !memcmp(name, globals[g].name, nl)) {
            hs_pk *v = make(vm, HS_PK_GLOBAL);
            if (v)
                v->global = (hs_pk_global)g;
            return push(vm, v);
        }
    char shown[160];
    size_t k = 0;
    for (size_t i = 0; i < ml + 1 + nl && k + 5 < sizeof shown; i++) {
        const unsigned char c = i < ml ? mod[i] : i == ml ? '.' : name[i - ml - 1];
        k += (size_t)snprintf(shown + k, sizeof shown - k, c >= 0x20 && c < 0x7f ? "%c" : "\\x%02x",
                              c);
    }
    return refuse(vm, "global not allowed (a state dict names only collections.OrderedDict, "
                      "torch._utils._rebuild_tensor_v2 / _rebuild_parameter and torch's "
                      "storage classes): ", shown);
}

static int op_global(machine *vm)
{
    const unsigned char *mod = vm->buf + vm->at;
    const unsigned char *end = vm->buf + vm->len;
    const unsigned char *nl1 = memchr(mod, '\n', (size_t)(end - mod));
    const unsigned char *name = nl1 ? nl1 + 1 : NULL;
    const unsigned char *nl2 = name ? memchr(name, '\n', (size_t)(end - name)) : NULL;
    if (!nl2)
        return refuse(vm, "module and name not ended by newlines", NULL);
    vm->at = (size_t)(nl2 + 1 - vm->buf);
    return global(vm, mod, (size_t)(nl1 - mod), name, (size_t)(nl2 - name));
}

static int op_stack_global(machine *vm)
{
    int rc = HS_OK;
    hs_pk *name = pop(vm, &rc), *mod = name ? pop(vm, &rc) : NULL;
    if (rc)
        return rc;
    if (name->kind != HS_PK_STR || mod->kind != HS_PK_STR)
        return refuse(vm, "module and name are not strings", NULL);
    return global(vm, mod->bytes, mod->len, name->bytes, name->len);
}

/* REDUCE: OrderedDict() is an empty dict; a rebuild function applied to
 * a tuple is recorded; any other call refused. */
static int op_reduce(machine *vm)
{
    int rc = HS_OK;
    hs_pk *args = pop(vm, &rc), *fn = args ? pop(vm, &rc) : NULL;
    if (rc)
        return rc;
    if (fn->kind != HS_PK_GLOBAL)
        return refuse(vm, "calls ", hs_pk_kind_name(fn));
    if (args->kind != HS_PK_TUPLE)
        return refuse(vm, "the arguments are not a tuple", NULL);
    if (fn->global == HS_PK_ORDERED_DICT) {
        if (args->n)
            return refuse(vm, "collections.OrderedDict called with arguments", NULL);
        hs_pk *d = make(vm, HS_PK_DICT);
        if (d)
            d->ordered = 1;
        return push(vm, d);
    }
    if (fn->global != HS_PK_REBUILD_TENSOR_V2 && fn->global != HS_PK_REBUILD_PARAMETER)
        return refuse(vm, "calls ", hs_pk_global_name(fn->global));
    hs_pk *call = make(vm, HS_PK_CALL);
    if (call)
        call->global = fn->global, call->args = args, call->depth = args->depth;
    return push(vm, call);
}

/* BUILD: only an OrderedDict's attributes (a state dict's _metadata), set
 * from a dict: nothing to keep. */
static int op_build(machine *vm)
{
    int rc = HS_OK;
    hs_pk *state = pop(vm, &rc), *obj = state ? pop(vm, &rc) : NULL;
    if (rc)
        return rc;
    if (obj->kind != HS_PK_DICT || !obj->ordered || state->kind != HS_PK_DICT)
        return refuse(vm, "sets the state of ", hs_pk_kind_name(obj));
    return push(vm, obj);
}

/* TUPLE, LIST, DICT: the items above the top mark into a new container. */
static int from_mark(machine *vm, hs_pk_kind kind)
{
    size_t first = 0;
    int rc = pop_mark(vm, &first);
    if (rc)
        return rc;
    if (kind == HS_PK_DICT && (vm->sp - first) % 2)
        return refuse(vm, "an odd number of keys and values", NULL);
    hs_pk *c = make(vm, kind);
    if (!c)
        return push(vm, NULL);
    for (size_t i = first; !rc && i < vm->sp; i++)
        rc = add(vm, c, vm->stack[i]);
    vm->sp = first;
    return rc ? rc : push(vm, c);
}

static int tuple_of(machine *vm, size_t n)
{
    const size_t floor = vm->n_marks ? vm->marks[vm->n_marks - 1] : 0;
    if (vm->sp - floor < n)
        return refuse(vm, "the stack is empty", NULL);
    hs_pk *t = make(vm, HS_PK_TUPLE);
    if (!t)
        return push(vm, NULL);
    int rc = HS_OK;
    for (size_t i = vm->sp - n; !rc && i < vm->sp; i++)
        rc = add(vm, t, vm->stack[i]);
    vm->sp -= n;
    return rc ? rc : push(vm, t);
}

/* APPEND(S) and SETITEM(S): the items above the top mark (or the top one or
 * two) into the list or dict below them. */
static int extend(machine *vm, int marked, size_t n, hs_pk_kind kind)
{
    size_t first = 0;
    int rc = HS_OK;
    if (marked)
        rc = pop_mark(vm, &first);
    else {
        const size_t floor = vm->n_marks ? vm->marks[vm->n_marks - 1] : 0;
        if (vm->sp - floor < n + 1)
            return refuse(vm, "the stack is empty", NULL);
        first = vm->sp - n;
    }
    if (rc)
        return rc;
    const size_t floor = vm->n_marks ? vm->marks[vm->n_marks - 1] : 0;
    if (first == 0 || first - 1 < floor || !vm->stack[first - 1])
        return refuse(vm, "nothing to add the items to", NULL);
    hs_pk *c = vm->stack[first - 1];
    if (c->kind != kind)
        return refuse(vm, "adds items to ", hs_pk_kind_name(c));
    if (kind == HS_PK_DICT && (vm->sp - first) % 2)
        return refuse(vm, "an odd number of keys and values", NULL);
    for (size_t i = first; !rc && i < vm->sp; i++)
        rc = add(vm, c, vm->stack[i]);
    vm->sp = first;
    return rc;
}

static int op_long(machine *vm, size_t n)
{
    int rc = HS_OK;
    const unsigned char *p = take(vm, n, &rc);
    if (rc)
        return rc;
    hs_pk *v = make(vm, HS_PK_INT);
    if (!v)
        return push(vm, NULL);
    if (n <= 8) { /* sign-extended from its n bytes */
        uint64_t u = n ? hs_le_bytes(p, (int)n) : 0;
        if (n && n < 8 && (p[n - 1] & 0x80))
            u |= ~(uint64_t)0 << (8 * n);
        v->i = (int64_t)u;
    } else {
        v->kind = HS_PK_BIGINT, v->bytes = p, v->len = n;
    }
    return push(vm, v);
}

static int op_str(machine *vm, size_t n)
{
    int rc = HS_OK;
    const unsigned char *p = take(vm, n, &rc);
    if (rc)
        return rc;
    hs_pk *v = make(vm, HS_PK_STR);
    if (v)
        v->bytes = p, v->len = n;
    return push(vm, v);
}

/* The length argument of n bytes, then the string. */
static int op_sized_str(machine *vm, int n)
{
    int rc = HS_OK;
    const unsigned char *p = take(vm, (size_t)n, &rc);
    return rc ? rc : op_str(vm, (size_t)hs_le_bytes(p, n) > vm->len ? vm->len + 1 : (size_t)hs_le_bytes(p, n));
}

static int op_int(machine *vm, int64_t i, hs_pk_kind kind)
{
    hs_pk *v = make(vm, kind);
    if (v)
        v->i = i;
    return push(vm, v);
}

/* One opcode at vm->at; *stop set at STOP. */
static int step(machine *vm, hs_pk **out, int *stop)
{
    int rc = HS_OK;
    vm->op_at = vm->at;
    vm->op = vm->buf[vm->at++];
    const unsigned char *p;
    switch (vm->op) {
    case 0x80: /* PROTO */
        if ((p = take(vm, 1, &rc)) && (*p < 2 || *p > 5))
            return refuse(vm, "a protocol other than 2 to 5", NULL);
        return rc;
    case 0x95: /* FRAME: the frame's length, which the reading ignores */
        take(vm, 8, &rc);
        return rc;
    case '.':
        *out = pop(vm, &rc);
        *stop = 1;
        return rc;
    case '(':
        if (vm->n_marks == HS_PK_MAX_DEPTH) {
            char d[64];
            snprintf(d, sizeof d, "%d", HS_PK_MAX_DEPTH);
            return refuse(vm, "marks nested deeper than ", d);
        }
        vm->marks[vm->n_marks++] = vm->sp;
        return HS_OK;
    case '0':
        pop(vm, &rc);
        return rc;
    case '}':
        return push(vm, make(vm, HS_PK_DICT));
    case ']':
        return push(vm, make(vm, HS_PK_LIST));
    case ')':
        return push(vm, make(vm, HS_PK_TUPLE));
    case 't':
        return from_mark(vm, HS_PK_TUPLE);
    case 'l':
        return from_mark(vm, HS_PK_LIST);
    case 'd':
        return from_mark(vm, HS_PK_DICT);
    case 0x85: case 0x86: case 0x87:
        return tuple_of(vm, (size_t)(vm->op - 0x84));
    case 'a':
        return extend(vm, 0, 1, HS_PK_LIST);
    case 'e':
        return extend(vm, 1, 0, HS_PK_LIST);
    case 's':
        return extend(vm, 0, 2, HS_PK_DICT);
    case 'u':
        return extend(vm, 1, 0, HS_PK_DICT);
    case 'J':
        return (p = take(vm, 4, &rc)) ? op_int(vm, (int32_t)(uint32_t)hs_le_bytes(p, 4), HS_PK_INT) : rc;
    case 'K':
        return (p = take(vm, 1, &rc)) ? op_int(vm, p[0], HS_PK_INT) : rc;
    case 'M':
        return (p = take(vm, 2, &rc)) ? op_int(vm, (int64_t)hs_le_bytes(p, 2), HS_PK_INT) : rc;
    case 0x8a:
        return (p = take(vm, 1, &rc)) ? op_long(vm, p[0]) : rc;
    case 0x8b: /* a length past the end (a negative one included) is refused */
        return (p = take(vm, 4, &rc)) ? op_long(vm, (size_t)hs_le_bytes(p, 4)) : rc;
    case 'G': {
        if (!(p = take(vm, 8, &rc)))
            return rc;
        uint64_t u = 0;
        for (int i = 0; i < 8; i++)
            u = u << 8 | p[i];
        hs_pk *v = make(vm, HS_PK_FLOAT);
        if (v)
            memcpy(&v->f, &u, sizeof v->f);
        return push(vm, v);
    }
    case 'N':
        return push(vm, make(vm, HS_PK_NONE));
    case 0x88: case 0x89:
        return op_int(vm, vm->op == 0x88, HS_PK_BOOL);
    case 'U': case 'C': case 0x8c:
        return op_sized_str(vm, 1);
    case 'T': case 'B': case 'X':
        return op_sized_str(vm, 4);
    case 0x8d: case 0x8e:
        return op_sized_str(vm, 8);
    case 'c':
        return op_global(vm);
    case 0x93:
        return op_stack_global(vm);
    case 'R':
        return op_reduce(vm);
    case 'b':
        return op_build(vm);
    case 'Q': {
        hs_pk *id = pop(vm, &rc), *v = id ? make(vm, HS_PK_PERSID) : NULL;
        if (rc)
            return rc;
        if (v)
            v->args = id, v->depth = id->depth;
        return push(vm, v);
    }
    case 'q':
        return (p = take(vm, 1, &rc)) ? memo_put(vm, p[0]) : rc;
    case 'r':
        return (p = take(vm, 4, &rc)) ? memo_put(vm, hs_le_bytes(p, 4)) : rc;
    case 0x94:
        return memo_put(vm, vm->memo_set);
    case 'h':
        return (p = take(vm, 1, &rc)) ? memo_get(vm, p[0]) : rc;
    case 'j':
        return (p = take(vm, 4, &rc)) ? memo_get(vm, hs_le_bytes(p, 4)) : rc;
    case 0x97: case 0x98:
        return refuse(vm, "out-of-band buffers are not read", NULL);
    default:
        return refuse(vm, opcode_name(vm->op) ? "not allowed in a state dict" : "unknown opcode",
                      NULL);
    }
}

int hs_pickle_read(hs_pickle *pk, const unsigned char *buf, size_t len, const char *what,
                   hs_pk **out, size_t *used)
{
    machine vm = { .pk = pk, .buf = buf, .len = len, .what = what };
    int rc = HS_OK, stop = 0;
    *out = NULL;
    while (!rc && !stop) {
        if (vm.at >= vm.len) {
            rc = hs_fail(HS_EFORMAT, "%s: the pickle ends at byte %zu without its STOP opcode",
                         what, vm.len);
            break;
        }
        rc = step(&vm, out, &stop);
    }
    if (rc)
        *out = NULL;
    *used = vm.at;
    free(vm.stack);
    free(vm.memo);
    return rc;
}

void hs_pickle_free(hs_pickle *pk)
{
    for (size_t i = 0; i < pk->n; i++) {
        free(pk->all[i]->item);
        free(pk->all[i]);
    }
    free(pk->all);
    memset(pk, 0, sizeof *pk);
}
