// pm2 start configs/pm2/ecosystem.config.js   (then: pm2 logs cacheon-validator, pm2 save)
// Edit the env block (or export the variables) for your netuid, network and wallet.
const NETUID = process.env.CACHEON_NETUID || "1";
const NETWORK = process.env.CACHEON_NETWORK || "finney";
const WALLET = process.env.CACHEON_WALLET || "default";
const VALIDATOR_HOTKEY = process.env.CACHEON_VALIDATOR_HOTKEY || "default";
const ARENA = process.env.CACHEON_ARENA || "cpu"; // or configs/arena/<name>.toml (kind = "gpu")
const PYTHON = process.env.CACHEON_PYTHON || ".venv/bin/python";

module.exports = {
  apps: [
    {
      name: "cacheon-validator",
      script: "neurons/validator.py",
      interpreter: PYTHON,
      cwd: __dirname + "/../..",
      args: [
        "--netuid", NETUID,
        "--subtensor.network", NETWORK,
        "--wallet.name", WALLET,
        "--wallet.hotkey", VALIDATOR_HOTKEY,
        "--chain", "bittensor",
        "--state-dir", ".cacheon/validator",
        "--arena", ARENA,
        "--interval", "60",
      ],
      // The state DB makes restarts safe (kill -9 included), so restart freely but back off.
      autorestart: true,
      exp_backoff_restart_delay: 1000,
      max_restarts: 50,
      min_uptime: "60s",
      kill_timeout: 30000, // SIGINT first: the loop stops after the current item
      out_file: ".cacheon/logs/validator.out.log",
      error_file: ".cacheon/logs/validator.err.log", // structlog JSON lines go to stderr
      merge_logs: true,
      time: true,
      env: { PYTHONUNBUFFERED: "1", CACHEON_LOG_LEVEL: "info" },
    },
    // Miner (uncomment when neurons/miner.py is in place): commits a packed bundle served over https.
    // {
    //   name: "cacheon-miner",
    //   script: "neurons/miner.py",
    //   interpreter: PYTHON,
    //   cwd: __dirname + "/../..",
    //   args: [
    //     "--netuid", NETUID,
    //     "--subtensor.network", NETWORK,
    //     "--wallet.name", WALLET,
    //     "--wallet.hotkey", process.env.CACHEON_MINER_HOTKEY || "miner",
    //     "--bundle", "my_bundle/",
    //     "--url", "https://example.org/my_bundle.tar.gz",
    //   ],
    //   autorestart: false,
    //   out_file: ".cacheon/logs/miner.out.log",
    //   error_file: ".cacheon/logs/miner.err.log",
    //   env: { PYTHONUNBUFFERED: "1" },
    // },
  ],
};
