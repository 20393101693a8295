// The graphile-worker side of the peers scenario of "app bench": it
// prepares a backlog of no-op jobs in a schema of its own and works it, as
// fleet's bench asks. bench/peers/install.sh copies it beside the pinned
// graphile-worker it installs (package.json, package-lock.json), where the
// bench runs it with node.
//
//   node run.mjs prepare --url URL --schema S --jobs N
//   node run.mjs work --url URL --schema S --concurrency 100 --local-queue 500
//
// prepare installs graphile-worker's tables into the schema and adds N
// jobs, then prints "ready N". work runs one worker pool with the local
// queue and batched completions and failures (delays 0), prints
// "first UNIX_NANOS" when its first job starts, and stops gracefully on
// SIGTERM or SIGINT. The bench counts what is left.
// A stop may come while the modules below are still loading (a small
// backlog can be gone before a second process is up): it is heard from
// the first line on, and carried out once there is a runner to stop.
let stopRequested = false;
let onStop = () => process.exit(143); // prepare: nothing to finish

for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => {
    stopRequested = true;
    onStop();
  });
}
const { Logger, makeWorkerUtils, run, runMigrations } = await import("graphile-worker");
const { default: pg } = await import("pg");

function parse(argv) {
  const [cmd, ...rest] = argv;
  const opts = {};
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i];
    if (!key.startsWith("--") || i + 1 >= rest.length) {
      throw new Error(`argument ${JSON.stringify(key)}: want --name value pairs`);
    }
    opts[key.slice(2)] = rest[i + 1];
  }
  for (const need of ["url", "schema"]) {
    if (!opts[need]) throw new Error(`--${need} is required`);
  }
  return { cmd, opts };
}

// libpqURL makes url's sslmode mean what it means to libpq and pgx (and
// so to fleet and River on the same URL): node-postgres alone verifies the
// server's certificate under sslmode=require or prefer, and uses no TLS
// without an sslmode, where libpq's default, prefer, uses TLS when the
// server offers it and goes without when it does not.
async function libpqURL(url) {
  const m = /^(postgres(?:ql)?:\/\/[^?]*)(?:\?(.*))?$/s.exec(url);
  if (!m) throw new Error("--url: want a postgres:// URL");
  // Not new URL(): a URL with no host before its path (a Unix socket given
  // as ?host=/dir) is not a WHATWG URL, though libpq takes it.
  const params = new URLSearchParams(m[2] ?? "");
  if (params.has("uselibpqcompat")) return url;
  params.set("uselibpqcompat", "true");
  const mode = params.get("sslmode") ?? "prefer";
  params.set("sslmode", mode);
  if (mode === "prefer") {
    const probe = new pg.Client({ connectionString: `${m[1]}?${params}` });
    try {
      await probe.connect();
    } catch (e) {
      if (!/does not support SSL/.test(String(e.message))) throw e;
      params.set("sslmode", "disable");
    } finally {
      await probe.end().catch(() => {});
    }
  }
  return `${m[1]}?${params}`;
}

function int(opts, name, dflt) {
  const v = opts[name] === undefined ? dflt : Number(opts[name]);
  if (!Number.isInteger(v) || v < 1) {
    throw new Error(`--${name} ${JSON.stringify(opts[name])}: want a positive whole number`);
  }
  return v;
}

// Warnings and errors only, on stderr.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`);
});

function nowNanos() {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;
}

async function prepare(opts) {
  const jobs = int(opts, "jobs", 0);
  const shared = { connectionString: opts.url, schema: opts.schema, logger };
  await runMigrations(shared);
  const utils = await makeWorkerUtils(shared);
  try {
    const batch = 10000;
    for (let done = 0; done < jobs; done += batch) {
      const n = Math.min(batch, jobs - done);
      await utils.addJobs(Array.from({ length: n }, () => ({ identifier: "noop", payload: {} })));
    }
  } finally {
    await utils.release();
  }
  console.log(`ready ${jobs}`);
}

async function work(opts) {
  onStop = () => {}; // until the runner is there (stopRequested is kept)
  let first = false;
  const runner = await run({
    connectionString: opts.url,
    schema: opts.schema,
    logger,
    noHandleSignals: true,
    taskList: {
      noop: async () => {
        if (!first) {
          first = true;
          console.log(`first ${nowNanos()}`);
        }
      },
    },
    preset: {
      worker: {
        concurrentJobs: int(opts, "concurrency", 100),
        localQueue: { size: int(opts, "local-queue", 500) },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
      },
    },
  });
  console.log("started");
  let stopping = false;
  onStop = () => {
    if (stopping) return;
    stopping = true;
    runner.stop().catch((e) => console.error("stop:", e));
  };
  if (stopRequested) onStop();
  await runner.promise;
}

try {
  const { cmd, opts } = parse(process.argv.slice(2));
  opts.url = await libpqURL(opts.url);
  if (cmd === "prepare") await prepare(opts);
  else if (cmd === "work") await work(opts);
  else throw new Error(`unknown command ${JSON.stringify(cmd)}: want prepare or work`);
} catch (e) {
  console.error(`graphile-bench: ${e.message ?? e}`);
  process.exit(1);
}
