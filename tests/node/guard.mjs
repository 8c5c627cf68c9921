// SPDX-License-Identifier: MIT
// guard(name): makes a test script print one "FAIL <name>: <error>" line and exit 1 whatever
// ends it early (an uncaught error, a rejected promise, the caller's timeout signal), so that a
// script that cannot finish is never silent (tests/run.sh counts only PASS/FAIL/SKIP lines).
// Returns die(error), for the script's own fatal errors. brief(error): the first lines of its
// stack, on one line.
export const brief = (e) => (e && e.stack ? e.stack : String(e)).split('\n').slice(0, 3).join(' | ');
export function guard(name) {
  const die = (e) => {
    console.log(`FAIL ${name}: ${brief(e)}`);
    process.exit(1);
  };
  process.on('uncaughtException', die);
  process.on('unhandledRejection', die);
  for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => die(new Error(`killed by ${sig} before finishing`)));
  return die;
}
