/**
 * A progress bar on stderr for one phase. It appears once the phase has run for a second (short
 * phases stay silent); on a terminal it redraws in place, elsewhere it prints a line per quarter.
 */
export function progress(label: string, total: number) {
  const started = Date.now();
  const tty = process.stderr.isTTY;
  let done = 0;
  let lastQuarter = 0;
  let shown = false;
  const render = () => {
    if (Date.now() - started < 1000) return;
    const fraction = total > 0 ? Math.min(1, done / total) : 1;
    if (tty) {
      const width = 30;
      const bar = '#'.repeat(Math.round(fraction * width)).padEnd(width, '.');
      process.stderr.write(`\r${label.padEnd(34)} [${bar}] ${String(Math.round(fraction * 100)).padStart(3)}%  ${done}/${total}`);
      shown = true;
    } else if (Math.floor(fraction * 4) > lastQuarter) {
      lastQuarter = Math.floor(fraction * 4);
      process.stderr.write(`${label}: ${Math.round(fraction * 100)}% (${done}/${total})\n`);
    }
  };
  const timer = setInterval(render, 200);
  timer.unref();
  return {
    tick(n = 1) {
      done += n;
    },
    set(value: number) {
      done = value;
    },
    finish() {
      done = total;
      clearInterval(timer);
      render();
      if (shown) process.stderr.write('\n');
    },
  };
}
