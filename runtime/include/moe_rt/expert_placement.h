//===- expert_placement.h - which rank holds which expert -------*- C++ -*-===//
//
// The expert placement of a step scheduled with expert-placement=1
// (docs/load-aware.md §2): the slot table `slots` (G x S, S = E / G), slot
// s of rank g (of the expert-parallel group) holding logical expert
// slots[g S + s]. Users give it as expert -> rank (`ranks`, E entries, E/G
// per rank: moe-run --expert-placement, the generated driver's option);
// each rank then holds its experts in increasing order. One place for the
// rules and their messages, shared by moe-run, the generated step's API,
// parameter loading and the runtime's dispatch/combine (src/VarRoutePlan.h).
// Header-only C++ (no MPI, no runtime library): every tool can include it.
// Functions return "" or the reason, naming the entry at fault.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_EXPERT_PLACEMENT_H
#define MOE_RT_EXPERT_PLACEMENT_H

#include "moe_rt/command_line.h"
#include "moe_rt/option_values.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace moe_rt::expert_placement {

/// Expert parallelism's own layout: rank g holds experts g S ... g S + S - 1.
inline std::vector<int64_t> identitySlots(int64_t groups, int64_t slots) {
  std::vector<int64_t> t(groups * slots);
  for (int64_t i = 0; i < groups * slots; ++i)
    t[i] = i;
  return t;
}

/// "" when `t` (G x S, one slot per expert: G S = E) holds every expert
/// exactly once; else the first slot out of range or the second slot of a
/// repeated expert. `physical` (E entries, may be null) receives each
/// expert's slot index g S + s.
inline std::string checkSlots(const int64_t *t, int64_t groups, int64_t slots,
                              std::vector<int64_t> *physical = nullptr) {
  int64_t experts = groups * slots;
  std::vector<int64_t> at(experts, -1);
  auto name = [&](int64_t i) {
    return "rank " + std::to_string(i / slots) + " slot " +
           std::to_string(i % slots);
  };
  for (int64_t i = 0; i < experts; ++i) {
    int64_t e = t[i];
    if (e < 0 || e >= experts)
      return "expert placement: " + name(i) + " holds expert " +
             std::to_string(e) + ", not one of the " + std::to_string(experts) +
             " experts";
    if (at[e] >= 0)
      return "expert placement: expert " + std::to_string(e) +
             " is in two slots (" + name(at[e]) + " and " + name(i) +
             "); the table must be a permutation of the experts";
    at[e] = i;
  }
  if (physical)
    *physical = std::move(at);
  return "";
}

/// The slot table of expert -> rank `ranks` over `groups` ranks: "" or the
/// entry at fault (wrong length, a rank out of range, a rank holding more
/// or fewer than E/G experts).
inline std::string slotsFromRanks(const std::vector<int64_t> &ranks,
                                  int64_t experts, int64_t groups,
                                  std::vector<int64_t> &t) {
  if (int64_t(ranks.size()) != experts)
    return "expert placement: " + std::to_string(ranks.size()) +
           " entries, expected " + std::to_string(experts) +
           " (one rank per expert)";
  if (groups <= 0 || experts % groups)
    return "expert placement: " + std::to_string(experts) +
           " experts do not spread evenly over " + std::to_string(groups) +
           " ranks";
  int64_t slots = experts / groups;
  std::vector<int64_t> held(groups, 0);
  for (int64_t e = 0; e < experts; ++e) {
    if (ranks[e] < 0 || ranks[e] >= groups)
      return "expert placement: entry " + std::to_string(e) + " (expert " +
             std::to_string(e) + "): rank " + std::to_string(ranks[e]) +
             " is not a rank of the " + std::to_string(groups) +
             "-rank expert-parallel group";
    ++held[ranks[e]];
  }
  for (int64_t g = 0; g < groups; ++g)
    if (held[g] != slots)
      return "expert placement: rank " + std::to_string(g) + " holds " +
             std::to_string(held[g]) +
             " experts; every rank must hold E/G = " + std::to_string(slots);
  t.clear();
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t e = 0; e < experts; ++e)
      if (ranks[e] == g)
        t.push_back(e);
  return "";
}

/// Expert -> rank of a checked slot table (the routing log's expert ranks).
inline std::vector<int64_t> ranksOf(const std::vector<int64_t> &t,
                                    int64_t groups) {
  std::vector<int64_t> ranks(t.size());
  int64_t slots = groups > 0 ? int64_t(t.size()) / groups : 0;
  for (size_t i = 0; i < t.size(); ++i)
    ranks[t[i]] = slots > 0 ? int64_t(i) / slots : 0;
  return ranks;
}

/// "1,0,1,0" (commas or blanks) as integers; "" or the token at fault.
inline std::string parseList(const std::string &text,
                             std::vector<int64_t> &out) {
  out.clear();
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || text[i] == ' ' || text[i] == '\n' ||
        text[i] == '\t' || text[i] == '\r') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9')
      ++j;
    if (j == i || j - i > 9 ||
        (j < text.size() && text[j] != ',' && text[j] != ' ' &&
         text[j] != '\n' && text[j] != '\t' && text[j] != '\r')) {
      size_t end = text.find_first_of(", \n\t\r", i);
      return "expert placement: '" + text.substr(i, end - i) + "' (entry " +
             std::to_string(out.size()) +
             ") is not a rank (a non-negative integer)";
    }
    out.push_back(std::stoll(text.substr(i, j - i)));
    i = j;
  }
  return "";
}

/// --expert-placement-at's "STEP:MAP": the step (>= 2: the first step
/// runs under the first map) and the map's text ([BLOCK=]RANKS or @FILE, read by
/// the caller); "" or what is wrong with `text`.
inline std::string splitLaterMap(const std::string &text, int &step,
                                 std::string &map) {
  size_t colon = text.find(':');
  std::optional<uint64_t> n =
      moe_rt::options::wholeNumber(text.substr(0, colon));
  if (colon == std::string::npos || !n || *n < 2 || *n > uint64_t(INT32_MAX))
    return "needs STEP:RANKS with STEP >= 2, got '" + text + "'";
  step = int(*n);
  map = text.substr(colon + 1);
  return "";
}

/// One --expert-placement-at STEP:MAP word of `args` appended to `later`
/// (moe-run and the generated driver read it alike); false for any other
/// word.
inline bool readLaterMap(moe_rt::options::CommandLine &args,
                         std::vector<std::pair<int, std::string>> &later) {
  std::string text;
  if (!args.text("--expert-placement-at", text))
    return false;
  int step = 0;
  std::string map;
  std::string why = splitLaterMap(text, step, map);
  if (!why.empty())
    args.fail("--expert-placement-at " + why);
  else
    later.emplace_back(step, map);
  return true;
}

/// Every block's slot table: block (the moe.task block index, as the
/// routing trace numbers blocks) -> G x S table. A block without an entry
/// has expert parallelism's layout (identitySlots). Each MoE block has its
/// own table, so a planner can move the experts of one layer only.
using Placement = std::map<int64_t, std::vector<int64_t>>;

/// One block's expert-parallel group size G and expert count E.
struct BlockShape {
  int64_t groups = 0, experts = 0;
};

/// The step input that carries block `block`'s slot table.
inline std::string slotsInputName(int64_t block) {
  return "expert_slots." + std::to_string(block);
}

/// The block of step input `name` ("expert_slots.<block>"), or -1.
inline int64_t blockOfSlotsInput(const std::string &name) {
  const std::string prefix = "expert_slots.";
  if (name.compare(0, prefix.size(), prefix) != 0 ||
      name.size() == prefix.size() || name.size() > prefix.size() + 9)
    return -1;
  for (size_t i = prefix.size(); i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9')
      return -1;
  return std::stoll(name.substr(prefix.size()));
}

/// Block `block`'s table in `p` (identity when `p` has none).
inline std::vector<int64_t> tableOf(const Placement &p, int64_t block,
                                    const BlockShape &shape) {
  auto it = p.find(block);
  if (it != p.end())
    return it->second;
  return identitySlots(shape.groups,
                       shape.groups > 0 ? shape.experts / shape.groups : 0);
}

/// Whether `a` and `b` place every block of `shapes` alike (a missing
/// table and the identity one are the same placement).
inline bool samePlacement(const Placement &a, const Placement &b,
                          const std::map<int64_t, BlockShape> &shapes) {
  for (const auto &[block, shape] : shapes)
    if (tableOf(a, block, shape) != tableOf(b, block, shape))
      return false;
  return true;
}

/// "block 0: 1,0,1,0; block 1: 0,1,0,1" (expert -> rank of every block of
/// `shapes`): how messages name a placement.
inline std::string describe(const Placement &p,
                            const std::map<int64_t, BlockShape> &shapes) {
  std::string out;
  for (const auto &[block, shape] : shapes) {
    std::vector<int64_t> ranks = ranksOf(tableOf(p, block, shape), shape.groups);
    out += (out.empty() ? "block " : "; block ") + std::to_string(block) + ":";
    for (size_t e = 0; e < ranks.size(); ++e)
      out += (e ? "," : " ") + std::to_string(ranks[e]);
  }
  return out;
}

/// `p` without the tables that are expert parallelism's own layout: what
/// a checkpoint records (a step without a placement records none).
inline Placement withoutIdentity(const Placement &p) {
  Placement out;
  for (const auto &[block, table] : p)
    for (size_t i = 0; i < table.size(); ++i)
      if (table[i] != int64_t(i)) {
        out[block] = table;
        break;
      }
  return out;
}

/// Applies `text` to `p` for the blocks `shapes` (block -> G, E): either
/// one expert -> rank list for every block ("1,0,1,0,..."), or specs
/// "BLOCK=RANKS" separated by ';' or new lines, each setting one block
/// (the others keep their table). "" or the culprit: a block the step does
/// not have, a bad entry (named with its block).
inline std::string applySpec(const std::string &text,
                             const std::map<int64_t, BlockShape> &shapes,
                             Placement &p) {
  if (shapes.empty())
    return "expert placement: the step has no expert placement input";
  auto setBlock = [&](int64_t block, const std::string &list,
                      const std::string &where) -> std::string {
    const BlockShape &shape = shapes.at(block);
    std::vector<int64_t> ranks, t;
    std::string why = parseList(list, ranks);
    if (why.empty())
      why = slotsFromRanks(ranks, shape.experts, shape.groups, t);
    const std::string head = "expert placement: ";
    if (!why.empty() && !where.empty() && why.compare(0, head.size(), head) == 0)
      why = "expert placement of " + where + ": " + why.substr(head.size());
    if (!why.empty())
      return why;
    p[block] = std::move(t);
    return "";
  };
  if (text.find('=') == std::string::npos) {
    for (const auto &[block, shape] : shapes)
      if (std::string why = setBlock(block, text, ""); !why.empty())
        return why;
    return "";
  }
  size_t i = 0;
  while (i <= text.size()) {
    size_t end = text.find_first_of(";\n", i);
    if (end == std::string::npos)
      end = text.size();
    std::string spec = text.substr(i, end - i);
    i = end + 1;
    if (spec.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    size_t eq = spec.find('=');
    std::string name = eq == std::string::npos ? spec : spec.substr(0, eq);
    name.erase(0, name.find_first_not_of(" \t\r"));
    name.erase(name.find_last_not_of(" \t\r") + 1);
    int64_t block = blockOfSlotsInput("expert_slots." + name);
    if (eq == std::string::npos || block < 0)
      return "expert placement: '" + spec +
             "' is not BLOCK=RANKS (with several blocks, every map names "
             "its block)";
    if (!shapes.count(block)) {
      std::string known;
      for (const auto &kv : shapes)
        known += (known.empty() ? "" : ", ") + std::to_string(kv.first);
      return "expert placement: block " + std::to_string(block) +
             " has no expert placement (the step's placed blocks: " + known +
             ")";
    }
    if (std::string why = setBlock(block, spec.substr(eq + 1),
                                   "block " + std::to_string(block));
        !why.empty())
      return why;
  }
  return "";
}

} // namespace moe_rt::expert_placement

#endif // MOE_RT_EXPERT_PLACEMENT_H
