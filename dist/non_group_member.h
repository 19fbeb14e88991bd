// What new_group gives a rank outside the new group: PyTorch's
// GroupMember.NON_GROUP_MEMBER. Its rank and size are -1 (so get_rank and
// get_world_size on it answer -1, as PyTorch's); its collectives do nothing
// but warn, once per kind and process ("Running all_reduce on global rank 1
// which does not belong to the given group."), and return completed work, so
// code written for the members runs unchanged on the other ranks.
// SyncBatchNorm on it normalizes with local statistics (a size below 2);
// DistributedDataParallel refuses it.
#pragma once

#include "minidl/dist/process_group.h"

namespace minidl::dist {

// The non-member group of a process whose default-group rank is global_rank.
ProcessGroupPtr make_non_group_member(int global_rank);
bool is_non_group_member(const ProcessGroupPtr& group);

}  // namespace minidl::dist
