/* Checkpoints saved by torch.save (pytorch_model.bin and the shards of
 * pytorch_model.bin.index.json), read without executing them (SPEC §20):
 * the zip format of torch >= 1.6 (one ARCHIVE/data.pkl, its storages in
 * ARCHIVE/data/KEY, stored uncompressed) and the legacy format before it (magic
 * number, protocol, system information, the state dict, its storage keys,
 * then the raw storages). The state dict's pickle is read by hs_pickle
 * (pickle.h); every tensor must be contiguous and lie inside its storage.
 *
 * The file is opened as hs_safetensors (safetensors.h): mapped whole, one
 * hs_st_tensor per entry of the state dict whose bytes begin..end are its
 * elements in the file (data is the mapping's start), so everything that
 * reads a safetensors file reads this one. Tensors may share a storage
 * (tied weights, views at offsets). Float, Half, BFloat16 and Double
 * storages give F32, F16, BF16 and F64 tensors; Long, Int, Byte and Bool
 * storages are HS_DT_OTHER (I64, I32, U8, BOOL): buffers a family ignores,
 * refused where a parameter is read. */
#ifndef HS_PYTORCH_H
#define HS_PYTORCH_H

#include "safetensors.h"

/* Opens path as hs_st_open does a safetensors file. HS_EIO when it cannot be
 * read; HS_EFORMAT naming the file and the zip member, opcode, global or
 * tensor at fault. */
int hs_pt_open(hs_safetensors *st, const char *path);

#endif
