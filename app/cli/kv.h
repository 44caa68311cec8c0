#pragma once
// What `generate` says about KV memory: the pool figures of a paged batch (blocks each sequence maps,
// blocks that exist, what sharing saved, prefill positions skipped) and the prompt cache file it used.
// The figures come from SessionGroup::memory(); this file only prints them.
//
//   kv_report_json(group)    the figures as one JSON object ("kv" in `generate --json`)
//   print_kv_report(group)   the same as a few lines on stderr
#include "io/json_write.h"
#include "run/session_group.h"

namespace kvscope {

JsonOut kv_report_json(const SessionGroup& group);
void print_kv_report(const SessionGroup& group);

}  // namespace kvscope
