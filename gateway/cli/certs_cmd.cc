// fedctl certs init-ca | issue: a federation's CA and its leaf certificates,
// offline (no gateway is dialled).
#include <cstdio>
#include <memory>

#include "base/str_cat.h"
#include "federation/names.h"
#include "gateway/cli/command.h"
#include "gateway/security/certs.h"
#include "gateway/security/identity.h"

namespace fedgate::cli {

void AddCertsCommands(CLI::App& app, Commands* out) {
  auto* certs = app.add_subcommand("certs", "create a federation CA and issue certificates");
  certs->require_subcommand(1);

  struct InitCa {
    std::string dir, federation;
    int days = 3650;
  };
  auto init = std::make_shared<InitCa>();
  auto* init_ca = certs->add_subcommand("init-ca", "create a new CA for a federation");
  init_ca->add_option("--dir", init->dir, "where to write ca.pem and ca-key.pem")->required();
  init_ca->add_option("--federation", init->federation, "federation (trust domain) name")
      ->required();
  init_ca->add_option("--days", init->days, "validity in days")->capture_default_str();
  out->push_back({init_ca, [init](const Globals&) {
                    if (!federation::IsValidName(init->federation)) {
                      Die(StrCat("invalid federation name \"", init->federation,
                                 "\" (want 1-63 of [a-z0-9-])"),
                          2);
                    }
                    auto st = gateway::InitCa(init->dir, init->federation, init->days);
                    if (!st.ok()) Die(std::string(st.message()));
                    std::fprintf(stderr, "created CA for federation %s in %s\n",
                                 init->federation.c_str(), init->dir.c_str());
                    return 0;
                  }});

  struct Issue {
    std::string ca_dir, out_dir, site, role, name, tenant, user;
    std::vector<std::string> dns, ips;
    int days = 397;
  };
  auto o = std::make_shared<Issue>();
  auto* issue = certs->add_subcommand("issue", "issue a gateway, admin or user certificate");
  issue->add_option("--ca-dir", o->ca_dir, "the CA folder from init-ca")->required();
  issue->add_option("--out", o->out_dir, "where to write ca.pem, cert.pem, key.pem")->required();
  issue->add_option("--site", o->site, "site of a gateway or admin");
  issue->add_option("--role", o->role, "gateway or admin");
  issue->add_option("--name", o->name, "admin name (default: admin)");
  issue->add_option("--tenant", o->tenant, "tenant of a user");
  issue->add_option("--user", o->user, "user name");
  issue->add_option("--dns", o->dns, "extra DNS SANs");
  issue->add_option("--ip", o->ips, "extra IP SANs");
  issue->add_option("--days", o->days, "validity in days")->capture_default_str();
  out->push_back({issue, [o](const Globals&) {
                    auto fed = gateway::CaFederation(o->ca_dir);
                    if (!fed.ok()) Die(std::string(fed.status().message()));
                    gateway::Identity id;
                    id.federation = *fed;
                    if (!o->tenant.empty() || !o->user.empty()) {
                      if (o->tenant.empty() || o->user.empty()) {
                        Die("a user certificate needs --tenant and --user", 2);
                      }
                      if (!o->site.empty() || !o->role.empty()) {
                        Die("--tenant/--user exclude --site/--role", 2);
                      }
                      id.role = gateway::Role::kUser;
                      id.tenant = o->tenant;
                      id.name = o->user;
                    } else {
                      if (o->site.empty() || o->role.empty()) {
                        Die("say --site and --role gateway|admin, or --tenant and --user", 2);
                      }
                      id.site = o->site;
                      if (o->role == "gateway") {
                        id.role = gateway::Role::kGateway;
                      } else if (o->role == "admin") {
                        id.role = gateway::Role::kAdmin;
                        id.name = o->name.empty() ? "admin" : o->name;
                      } else {
                        Die(StrCat("unknown role \"", o->role, "\" (want gateway or admin)"), 2);
                      }
                    }
                    const std::string uri = id.ToUri();
                    if (auto parsed = gateway::ParseSpiffeId(uri); !parsed.ok()) {
                      Die(std::string(parsed.status().message()), 2);
                    }
                    auto st = gateway::IssueToDir(o->ca_dir, o->out_dir, uri, o->dns, o->ips,
                                                  o->days);
                    if (!st.ok()) Die(std::string(st.message()));
                    std::fprintf(stderr, "issued %s into %s\n", uri.c_str(), o->out_dir.c_str());
                    return 0;
                  }});
}

}  // namespace fedgate::cli
