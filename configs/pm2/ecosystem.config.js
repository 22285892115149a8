// pm2 start /path/to/checkout/configs/pm2/ecosystem.config.js   (from any directory)
// then: pm2 logs cacheon-validator; pm2 save.  Every path below is absolute, resolved from this
// file's own location, so the working directory pm2 is started from does not matter.
// Settings come from the environment (export them before `pm2 start`, or edit the defaults):
//   CACHEON_NETUID, CACHEON_NETWORK, CACHEON_WALLET, CACHEON_VALIDATOR_HOTKEY, CACHEON_ARENA
//   (default configs/arena/dense.toml), CACHEON_ALLOW_CPU_TIMING=1 (only with CACHEON_ARENA=cpu),
//   CACHEON_PYTHON (interpreter; default <checkout>/.venv/bin/python, else python3 on PATH),
//   CACHEON_LOG_DIR (default $CACHEON_HOME/logs, CACHEON_HOME default ~/.cacheon),
//   CACHEON_METRICS_PORT (serve Prometheus metrics there; unset = off).
const fs = require("fs");
const os = require("os");
const path = require("path");

const ROOT = path.resolve(__dirname, "..", "..");
const env = process.env;
// No default netuid: a wrong one fails start-up ("not registered") and pm2 would restart it
// again and again; the file refuses to load instead, naming what to set.
if (!/^[0-9]+$/.test(env.CACHEON_NETUID || "")) {
  throw new Error(`cacheon: export CACHEON_NETUID (the subnet's netuid, an integer) before pm2 start; got ${JSON.stringify(env.CACHEON_NETUID ?? null)}`);
}
const NETUID = env.CACHEON_NETUID;
const NETWORK = env.CACHEON_NETWORK || "finney";
const WALLET = env.CACHEON_WALLET || "default";
const VALIDATOR_HOTKEY = env.CACHEON_VALIDATOR_HOTKEY || "default";
// A GPU arena config (kind = "gpu"; a relative path is taken from the checkout). Off a local chain
// the validator refuses "cpu" unless CACHEON_ALLOW_CPU_TIMING=1 (then every record is labelled
// cpu-timing:opt-in: host-timed slot calls, not engine measurements).
const ARENA_SPEC = env.CACHEON_ARENA || "configs/arena/dense.toml";
const ARENA = ARENA_SPEC === "cpu" ? ARENA_SPEC : path.resolve(ROOT, ARENA_SPEC);
const CPU_OPT_IN = env.CACHEON_ALLOW_CPU_TIMING === "1" ? ["--allow-cpu-timing"] : [];
// The state dir defaults to $CACHEON_HOME/validator/<network>/<netuid>/<hotkey> (outside the checkout).
const VENV_PYTHON = path.join(ROOT, ".venv", "bin", "python");
const PYTHON = env.CACHEON_PYTHON || (fs.existsSync(VENV_PYTHON) ? VENV_PYTHON : "python3");
const HOME = env.CACHEON_HOME || path.join(os.homedir(), ".cacheon");
const LOG_DIR = path.resolve(env.CACHEON_LOG_DIR || path.join(HOME, "logs"));
const METRICS = env.CACHEON_METRICS_PORT ? ["--metrics-port", env.CACHEON_METRICS_PORT] : [];

module.exports = {
  apps: [
    {
      name: "cacheon-validator",
      script: path.join(ROOT, "neurons", "validator.py"),
      interpreter: PYTHON,
      cwd: ROOT,
      args: [
        "--netuid", NETUID,
        "--subtensor.network", NETWORK,
        "--wallet.name", WALLET,
        "--wallet.hotkey", VALIDATOR_HOTKEY,
        "--chain", "bittensor",
        "--arena", ARENA,
        ...CPU_OPT_IN,
        "--screen-device", ARENA === "cpu" ? "cpu" : "cuda",
        "--interval", "60",
        ...METRICS,
      ],
      // The state DB makes restarts safe (kill -9 included), so restart freely but back off.
      autorestart: true,
      exp_backoff_restart_delay: 1000,
      max_restarts: 50,
      min_uptime: "60s",
      // pm2 sends SIGINT, then SIGKILL after kill_timeout: in-flight arena engines are killed
      // (their process groups) and the verdict in flight stays due (NO_DECISION, retried).
      kill_timeout: 30000,
      // Logs are JSON lines (structlog, and stdlib loggers such as the bittensor SDK routed
      // through it) on stderr. No `time` prefix and no pm2 log_type json: either would wrap
      // every line and the files would stop being one JSON object per line.
      out_file: path.join(LOG_DIR, "validator.out.log"),
      error_file: path.join(LOG_DIR, "validator.err.log"),
      merge_logs: true,
      time: false,
      env: { PYTHONUNBUFFERED: "1", CACHEON_LOG_LEVEL: "info" },
    },
    // Miner: uncomment to run neurons/miner.py under pm2. It verifies and commits the bundle
    // once, then keeps serving it (--serve-dir) or probing the URL you host (--url). Off a local
    // chain the URL must be public https (validators refuse loopback and private addresses).
    // {
    //   name: "cacheon-miner",
    //   script: path.join(ROOT, "neurons", "miner.py"),
    //   interpreter: PYTHON,
    //   cwd: ROOT,
    //   args: [
    //     "--netuid", NETUID,
    //     "--subtensor.network", NETWORK,
    //     "--wallet.name", WALLET,
    //     "--wallet.hotkey", env.CACHEON_MINER_HOTKEY || "miner",
    //     "--bundle", path.join(ROOT, "my_bundle"),
    //     "--url", "https://example.org/my_bundle.tar.gz",
    //   ],
    //   autorestart: false,
    //   out_file: path.join(LOG_DIR, "miner.out.log"),
    //   error_file: path.join(LOG_DIR, "miner.err.log"),
    //   time: false,
    //   env: { PYTHONUNBUFFERED: "1" },
    // },
  ],
};
