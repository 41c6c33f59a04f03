// MIG slices (docs/services.md): a node's GPUs may be partitioned into
// slices of named profiles ("1g.10gb"). A profile is its own resource: each
// profile's slices on a node become a node of their own, advertised under
// the model "<GPU model> MIG <profile>", which only a job asking for that
// profile (`mig:`) is placed on; a whole-GPU job never is. Pure.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "federation/inventory.h"

namespace fedgate::federation {

struct MigSlice {
  std::string profile;
  std::string uuid;      // "MIG-…"; "" = derive one
  bool derived = false;  // set by ExpandMig when it made the UUID
};

// "<compute>g.<memory>gb", e.g. 1g.10gb, 3g.40gb, 7g.80gb.
bool IsMigProfile(std::string_view profile);
uint32_t MigProfileMemoryGib(std::string_view profile);
std::string MigModel(std::string_view base_model, std::string_view profile);
// The profile of a MIG model; "" for a whole GPU's model.
std::string MigProfileOf(std::string_view model);
// A stable MIG UUID for a slice the inventory names no UUID for.
std::string DerivedMigUuid(std::string_view site, std::string_view node, uint32_t gpu, uint32_t index);

// `node` with its partitioned GPUs taken out (its whole GPUs keep their
// device indices), plus one node per profile ("<node>-mig-1g-10gb") whose
// devices are the slices' MIG UUIDs. INVALID_ARGUMENT naming what is wrong
// (a GPU index out of range, a bad profile, more than 7 slices on a GPU).
absl::StatusOr<std::vector<Node>> ExpandMig(const std::string& site, const Node& node,
                                            std::map<uint32_t, std::vector<MigSlice>> mig);

// The MIG devices `nvidia-smi -L` lists, by GPU index, with their real
// UUIDs: lines "GPU <i>: <name> (UUID: GPU-…)" each followed by its
// "  MIG <profile> Device <n>: (UUID: MIG-…)" lines (older drivers name a
// device "MIG-GPU-…/<gi>/<ci>"). Other lines are ignored. INVALID_ARGUMENT
// naming the line for a MIG line before any GPU, one it cannot read, or a
// profile fedgate does not know (e.g. "+me" variants).
absl::StatusOr<std::map<uint32_t, std::vector<MigSlice>>> ParseNvidiaSmiList(std::string_view text);

}  // namespace fedgate::federation
