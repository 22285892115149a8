// Optional, off by default: pm2 start configs/pm2/auto-update.config.js
// Every 15 min: newest vX.Y.Z release tag above the checkout -> checkout, reinstall, pm2 restart
// cacheon-validator (scripts/auto_update.py; docs/operators.md, Upgrades). Works from any cwd.
const path = require("path");
const REPO = path.resolve(__dirname, "..", "..");
const PYTHON = process.env.CACHEON_PYTHON || path.join(REPO, ".venv", "bin", "python");

module.exports = {
  apps: [
    {
      name: "cacheon-auto-update",
      script: path.join(REPO, "scripts", "auto_update.py"),
      interpreter: PYTHON,
      cwd: REPO,
      args: ["--repo", REPO, "--interval", process.env.CACHEON_UPDATE_INTERVAL || "900"],
      autorestart: true,
      max_restarts: 10,
      min_uptime: "60s",
      out_file: path.join(process.env.CACHEON_HOME || path.join(require("os").homedir(), ".cacheon"), "logs", "auto-update.log"),
      error_file: path.join(process.env.CACHEON_HOME || path.join(require("os").homedir(), ".cacheon"), "logs", "auto-update.log"),
      env: { PYTHONUNBUFFERED: "1" },
    },
  ],
};
