// The pages in a real browser: Debian's chromium driven by playwright-core.
// Run by tests/it/scenarios/browser.rs against the real `wavegate serve` and
// the fake forge, one step per run (`node pages.mjs <step>`), the server and
// the forge set up by the Rust test for that step. Environment:
//   WAVEGATE_URL          the server
//   CHROMIUM              the browser (default /usr/bin/chromium)
//   WAVEGATE_SCREENSHOTS  a directory: each main page is saved there as PNG
// Exits non-zero naming the first expectation that failed.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const base = process.env.WAVEGATE_URL;
const shots = process.env.WAVEGATE_SCREENSHOTS || '';
const step = process.argv[2];

function expect(condition, what) {
  if (!condition) {
    throw new Error(`expected ${what}`);
  }
}

async function shot(page, name) {
  if (shots) {
    mkdirSync(shots, { recursive: true });
    await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  }
}

/// Logs in from wherever the page sent the visitor: the login page, the
/// forge's authorisation page, and back.
async function logIn(page, forge, login) {
  expect(new URL(page.url()).pathname === '/login', `the login page, not ${page.url()}`);
  await shot(page, 'login');
  await page.getByRole('link', { name: `Log in with ${forge}` }).click();
  await page.locator('#login').fill(login);
  await page.locator('#authorize').click();
  await page.waitForLoadState();
}

/// Waits until `locator`'s text holds `text`.
async function untilText(locator, text) {
  await locator.filter({ hasText: text }).waitFor();
}

const steps = {
  // A lock left behind by a crashed run: erin, who may read the
  // repository, is refused when she releases it; ada, its admin, releases
  // it and the queue page shows it gone.
  async operate(page) {
    const queue = `${base}/repos/github/acme/infra/queue`;
    const release = page.getByRole('button', { name: 'Release if stale' });
    await page.goto(queue);
    await logIn(page, 'GitHub', 'erin');
    expect(page.url() === queue, `to come back to the queue, not ${page.url()}`);
    await release.click();
    await page.waitForLoadState();
    const refused = await page.locator('body').innerText();
    expect(
      refused.includes('erin may read github:acme/infra but not act on its locks and jobs'),
      `a reader refused, not ${refused}`,
    );

    await page.goto(`${base}/repos`);
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.waitForLoadState();
    await page.goto(queue);
    await logIn(page, 'GitHub', 'ada-admin');
    expect((await page.locator('table').first().innerText()).includes('app@dev'), 'the lock listed');
    await shot(page, 'queue-operator');
    await release.click();
    await page.waitForLoadState();
    expect(page.url() === queue, `back at the queue, not ${page.url()}`);
    const locks = await page.locator('h2:has-text("Members locked") + *').innerText();
    expect(locks.includes('None.'), `no lock left, not ${locks}`);
  },

  // An apply of app@dev is paused mid-command by the test: erin logs in,
  // opens the pull request, and sees what it printed so far in its running
  // command; the test lets it go on once told (`saw: paused`), and the
  // rest of its lines and how it ended appear on the same page, unreloaded.
  async live(page) {
    const pull = `${base}/repos/github/acme/infra/pulls/1`;
    await page.goto(pull);
    await logIn(page, 'GitHub', 'erin');
    const running = page.locator('pre[data-live]').first();
    await untilText(running, 'paused before applying');
    const status = page.locator(`[id="${await running.getAttribute('id')}-status"]`);
    expect((await status.innerText()) === 'running', 'the command still running');
    await shot(page, 'live');
    console.log('saw: paused');
    await untilText(running, 'going on');
    await untilText(status, 'exited with status 0');
    expect(page.url() === pull, 'the same page, never reloaded');
  },

  // Nobody logged in is sent to log in; erin, who reads the repository,
  // logs in with GitHub and lands on the pull request's page; the pages of
  // a repository she cannot read are refused.
  async read(page) {
    const pull = `${base}/repos/github/acme/infra/pulls/1`;
    await page.goto(pull);
    await logIn(page, 'GitHub', 'erin');
    expect(page.url() === pull, `to come back to ${pull}, not ${page.url()}`);
    const heading = await page.locator('h1').innerText();
    expect(heading.includes('Pull request #1'), `the pull request's heading, not ${heading}`);
    const nav = await page.locator('nav').innerText();
    expect(nav.includes('Logged in as erin'), `the visitor named, not ${nav}`);
    const body = await page.locator('body').innerText();
    expect(body.includes('prod'), 'the run by stage');
    expect(body.includes('rev-bob'), 'who approved');
    await shot(page, 'pull-request');

    await page.goto(`${base}/repos/github/acme/infra`);
    expect((await page.locator('h1').innerText()).includes('acme/infra'), 'the repository page');
    await shot(page, 'pull-requests');
    await page.goto(`${base}/repos/github/acme/infra/ledger`);
    expect((await page.locator('body').innerText()).includes('Verified'), 'the ledger verified');
    await shot(page, 'ledger');
    await page.goto(`${base}/repos/github/acme/infra/queue`);
    await shot(page, 'queue');
    await page.goto(`${base}/server`);
    expect((await page.locator('body').innerText()).includes('bubblewrap'), 'the sandbox named');
    await shot(page, 'server');

    const refused = await page.goto(`${base}/repos/forgejo/acme/infra/pulls/2`);
    expect(refused.status() === 403, `403 for another forge's repository, not ${refused.status()}`);
    const why = await page.locator('body').innerText();
    expect(why.includes('erin has no read access to forgejo:acme/infra'), `the refusal said, not ${why}`);

    await page.goto(`${base}/repos`);
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.waitForLoadState();
    expect(new URL(page.url()).pathname === '/login', `the login page after logging out, not ${page.url()}`);
  },
};

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  // Chromium's own sandbox stays on, as a user's browser runs it (the test
  // starts this script as an unprivileged user when it runs as root).
  chromiumSandbox: true,
  args: ['--disable-gpu'],
});
let failed = false;
try {
  if (!steps[step]) {
    throw new Error(`no step ${step}; the steps are ${Object.keys(steps).join(', ')}`);
  }
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  // Script errors and refused content (a CSP violation is a console error);
  // what failed to load is told by its response, below.
  const errors = [];
  page.on('pageerror', (error) => errors.push(String(error)));
  page.on('console', (message) => {
    if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) {
      errors.push(message.text());
    }
  });
  // Answers >= 400 other than the browser's own favicon guess and the
  // refusals a step asks for.
  const failures = [];
  page.on('response', (response) => {
    const url = new URL(response.url());
    if (response.status() >= 400 && url.pathname !== '/favicon.ico' && response.status() !== 403) {
      failures.push(`${response.status()} ${url.pathname}`);
    }
  });
  await steps[step](page);
  expect(errors.length === 0, `no script errors, not ${errors.join('; ')}`);
  expect(failures.length === 0, `every page and asset to load, not ${failures.join('; ')}`);
  console.log(`${step}: ok`);
} catch (error) {
  failed = true;
  console.error(`${step}: ${error.stack || error}`);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
