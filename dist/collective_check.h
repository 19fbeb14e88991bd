// Checked collectives (PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL and its
// ProcessGroupWrapper): before each collective, every rank publishes a
// fingerprint of it (operation, reduce op or root, dtype, shapes, device
// type) through the store and compares it with every other rank's. A
// mismatch, such as all_reduce on 3 elements on one rank and 4 on another,
// is then a minidl::Error on every rank naming both collectives, before any
// byte is sent. Unchecked, Gloo aborts the receiving process from its own
// network thread (a message longer than the buffer posted for it) and the
// other rank may return a wrong result; NCCL may hang or read out of bounds.
//
// On with MINIDL_DISTRIBUTED_DEBUG=DETAIL (or PyTorch's TORCH_DISTRIBUTED_DEBUG
// =DETAIL) in every rank's environment when the group is created. It costs a
// store round trip per rank and collective and lines the ranks up before
// each one (2 processes on loopback: a 4 KiB all_reduce 0.17 -> 0.27 ms,
// 4 MiB 2.1-3.5 -> 3.1-5.2 ms): a debugging mode, off by default as in PyTorch.
#pragma once

#include <memory>
#include <string>

#include "minidl/dist/process_group.h"

namespace minidl::dist {

// Whether the environment asks for checked collectives (DETAIL).
bool collective_checks_enabled();

// `inner` with every collective checked first through `store` (a store only
// this group's ranks use; keys are removed as the group moves on).
ProcessGroupPtr make_checked_group(ProcessGroupPtr inner, std::shared_ptr<Store> store);

}  // namespace minidl::dist
