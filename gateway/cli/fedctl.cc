// fedctl: the CLI of tenants and admins (DESIGN.md "Binaries"). One file per
// noun (certs, peers, links, jobs); this one only parses and dispatches.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "gateway/cli/command.h"

int main(int argc, char** argv) {
  using namespace fedgate::cli;
  CLI::App app{"fedctl: manage a fedgate federation"};
  app.require_subcommand(1);
  app.fallthrough();
  Globals g;
  app.add_option("--gateway", g.gateway,
                 "gateway HOST:PORT (default $FEDCTL_GATEWAY or 127.0.0.1:7443)");
  app.add_option("--tls-dir", g.tls_dir,
                 "folder with ca.pem, cert.pem, key.pem (default $FEDCTL_TLS_DIR)");
  app.add_option("--site", g.site,
                 "accept only this site's gateway as the server (default $FEDCTL_SITE, or the "
                 "file \"site\" in the TLS folder; none: any gateway of the federation)");
  app.add_option("-o,--output", g.output, "table, json or yaml (usage: also csv)")->capture_default_str();
  app.add_flag("!--no-follow", g.follow,
               "job commands: answer from the gateway asked, even for a job coordinated "
               "elsewhere (by default they go on to the job's coordinator)");

  Commands commands;
  AddCertsCommands(app, &commands);
  AddPeersCommands(app, &commands);
  AddNodesCommands(app, &commands);
  AddQuotaCommands(app, &commands);
  AddUsageCommands(app, &commands);
  AddLinksCommands(app, &commands);
  AddJobsCommands(app, &commands);
  AddServicesCommands(app, &commands);
  AddConsoleCommands(app, &commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "fedctl: %s (see --help)\n", e.what());
    return 2;
  }
  // A bad -o fails before anything runs (csv is usage's alone).
  const bool usage_csv = g.output == "csv" && app.got_subcommand("usage");
  if (!usage_csv) (void)g.format();
  for (const auto& c : commands) {
    if (c.sub->parsed()) return c.run(g);
  }
  return 0;
}
