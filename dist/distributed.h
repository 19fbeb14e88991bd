// The process-wide default group and PyTorch's torch.distributed functions.
//   dist::init_process_group("gloo");                       // env:// (minidl-launch sets it)
//   dist::init_process_group("gloo", "tcp://127.0.0.1:29500", world_size, rank);
//   dist::init_process_group("gloo", "file:///tmp/rendezvous", world_size, rank);
// env:// reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; tcp:// and
// file:// take rank and world_size as arguments or as ?rank=&world_size= in
// the URL. Rank 0 hosts the TCP store.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minidl/dist/non_group_member.h"
#include "minidl/dist/process_group.h"
#include "minidl/dist/store.h"

namespace minidl::dist {

void init_process_group(const std::string& backend = "gloo", const std::string& init_method = "env://",
                        int world_size = -1, int rank = -1, Milliseconds timeout = kDefaultTimeout);
bool is_initialized();
// Throws when init_process_group was not called (or the group was destroyed).
void destroy_process_group();

// The default group (throws when init_process_group was not called).
ProcessGroupPtr default_group();
std::shared_ptr<Store> default_store();
// Rank and world size of `group` (the default group when null). -1 / -1 when
// not initialized, like PyTorch's get_rank() raising is unhelpful in tools.
int get_rank(const ProcessGroupPtr& group = nullptr);
int get_world_size(const ProcessGroupPtr& group = nullptr);

// A group of some of the default group's ranks. Every rank of the default
// group must call it with the same ranks (in any order); ranks outside it get
// the non-member group (dist/non_group_member.h: rank and size -1, its
// collectives do nothing), as PyTorch's GroupMember.NON_GROUP_MEMBER. Group
// ranks follow the sorted global ranks, as PyTorch's.
ProcessGroupPtr new_group(const std::vector<int>& ranks, Milliseconds timeout = kDefaultTimeout);

// torch.distributed-style calls on `group` (default group when null),
// synchronous unless async_op. broadcast's src is a global rank, as
// PyTorch's (on a new_group, it must be one of its ranks); a group's own
// ProcessGroup::broadcast takes the group rank.
WorkPtr all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM, const ProcessGroupPtr& group = nullptr,
                   bool async_op = false);
WorkPtr broadcast(Tensor& tensor, int src = 0, const ProcessGroupPtr& group = nullptr, bool async_op = false);
WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input, const ProcessGroupPtr& group = nullptr,
                   bool async_op = false);
void barrier(const ProcessGroupPtr& group = nullptr);

}  // namespace minidl::dist
