import { existsSync } from 'node:fs';
import puppeteer, { type Browser } from 'puppeteer-core';

/** Debian's chromium (`apt-get install -y chromium`; .ci/run installs it); OUTBOX_TEST_CHROMIUM points elsewhere. */
export const CHROMIUM = process.env.OUTBOX_TEST_CHROMIUM || '/usr/bin/chromium';

/**
 * A real headless Chromium, driven over the DevTools protocol by puppeteer-core (which downloads
 * no browser of its own). Missing, it fails the test with one line saying how to install it: a
 * browser test is never skipped silently.
 */
export function launchChromium(): Promise<Browser> {
  // Thrown at once, not as a rejection: the caller fails before it starts anything else.
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: install it with "apt-get install -y chromium", or set OUTBOX_TEST_CHROMIUM to one`);
  // --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start.
  return puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'], defaultViewport: { width: 1280, height: 1000 } });
}

/** Closes the browser, and kills its process if it has not gone within 5 s (a hung close must not hang the run). */
export async function closeChromium(browser: Browser | undefined): Promise<void> {
  if (!browser) return;
  const child = browser.process();
  let timer: NodeJS.Timeout | undefined;
  const closed = await Promise.race([
    browser.close().then(() => true, () => false),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), 5000))),
  ]);
  clearTimeout(timer);
  if (!closed || (child && child.exitCode === null && child.signalCode === null)) child?.kill('SIGKILL');
}
