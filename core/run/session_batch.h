#pragma once
// Several sessions stepped together: one forward pass over a chunk from each, so the weights are read
// once for all of them (SessionGroup, the benchmarks). Each session's results equal its solo run bit for bit.
//
//   make_batch_workspace(sessions)  a workspace with room for one chunk of every session at once
//   step_batch(sessions, ws)        one step for every session not done. With share_prefix, the first
//                                   session still prefilling runs before the others, which then map the
//                                   blocks it filled; a session with the cache off runs alone
#include <span>

#include "run/session.h"

namespace kvscope {

Workspace make_batch_workspace(std::span<Session* const> sessions);
void step_batch(std::span<Session* const> sessions, Workspace& ws);

}  // namespace kvscope
