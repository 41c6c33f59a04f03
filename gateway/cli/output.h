// fedctl's three output forms: a human table, one JSON document (proto field
// names, zero values printed), or the same document as YAML.
#pragma once

#include <google/protobuf/message.h>

#include <string>
#include <vector>

namespace fedgate::cli {

enum class Format { kTable, kJson, kYaml };

std::string ToJson(const google::protobuf::Message& msg);
std::string JsonToYaml(const std::string& json);

// Left-aligned columns separated by two spaces.
std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

}  // namespace fedgate::cli
