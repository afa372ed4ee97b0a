// An OpenID Provider for the single sign-on tests: panva's oidc-provider (OpenID-certified), on a
// random loopback port. Its accounts are read from a JSON file at every sign-in, so a test changes
// a person's groups between two sign-ins by rewriting the file. Prints {"url", "issuer"} once ready.
//
//   node provider.mjs '{"modules": "<package.json>", "accounts": "<file>", "clients": [...], "mixUp": false, "logout": true}'
//
// modules: the package.json whose node_modules hold oidc-provider (playground/frontend's).
// clients: oidc-provider client metadata, plus codeTtlS (the life of its authorization codes).
// mixUp: its tokens are issued by another issuer (<url>/elsewhere) than the one its discovery
// document at <url> names (<url>): endpoints of one issuer behind the configuration of another.
// logout: false turns RP-initiated logout off (its discovery document then has no end_session_endpoint).
// The login "form" takes the account id by POST (login=<id>); consent is given without asking, as a
// first-party provider configured for the site does. PKCE is required of every client.

import { generateKeyPairSync } from "node:crypto";
import { readFileSync } from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const options = JSON.parse(process.argv[2]);
const { default: Provider } = await import(pathToFileURL(createRequire(options.modules).resolve("oidc-provider")));

function accounts() {
  return JSON.parse(readFileSync(options.accounts, "utf8"));
}

const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: "jwk" }), kid: "test-key-1", alg: "RS256", use: "sig" };
const codeTtl = Object.fromEntries(options.clients.map((c) => [c.client_id, c.codeTtlS ?? 60]));

const server = http.createServer();
server.listen(0, "127.0.0.1", () => {
  const url = `http://127.0.0.1:${server.address().port}`;
  const issuer = options.mixUp ? `${url}/elsewhere` : url;
  const provider = new Provider(issuer, {
    clients: options.clients.map(({ codeTtlS: _ttl, ...metadata }) => metadata),
    jwks: { keys: [signingKey] },
    cookies: { keys: ["sso-test-cookie-key"] },
    pkce: { required: () => true },
    features: { devInteractions: { enabled: false }, rpInitiatedLogout: { enabled: options.logout !== false } },
    scopes: ["openid", "email", "profile", "groups"],
    claims: {
      email: ["email", "email_verified"],
      profile: ["preferred_username", "name", "given_name", "family_name"],
      groups: ["groups"],
    },
    ttl: { AuthorizationCode: (_ctx, _code, client) => codeTtl[client.clientId] },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    async findAccount(_ctx, id) {
      const found = accounts()[id];
      if (!found) return undefined;
      return { accountId: id, claims: () => ({ sub: id, ...found }) };
    },
  });
  provider.proxy = false;
  if (options.mixUp) {
    provider.use(async (ctx, next) => {
      await next();
      if (ctx.path === "/.well-known/openid-configuration") ctx.body = { ...ctx.body, issuer: url };
    });
  }
  const handle = provider.callback();

  server.on("request", (req, res) => {
    const match = /^\/interaction\/([^/?]+)(\/login)?/.exec(req.url);
    if (!match) return handle(req, res);
    interact(provider, req, res, match[2] === "/login").catch((err) => {
      res.statusCode = 500;
      res.end(String(err));
    });
  });
  process.stdout.write(JSON.stringify({ url, issuer }) + "\n");
});

async function interact(provider, req, res, posted) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name === "login") {
    if (!posted) {
      res.setHeader("Content-Type", "text/html");
      res.end(`<form method="post" action="/interaction/${details.uid}/login"><input name="login"></form>`);
      return;
    }
    const accountId = new URLSearchParams(await body(req)).get("login");
    await provider.interactionFinished(req, res, { login: { accountId } }, { mergeWithLastSubmission: false });
    return;
  }
  // consent: everything the client asked for
  const grant = new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
  grant.addOIDCScope(details.params.scope);
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

function body(req) {
  return new Promise((resolve, reject) => {
    let data = "";
    req.on("data", (chunk) => (data += chunk));
    req.on("end", () => resolve(data));
    req.on("error", reject);
  });
}

process.on("SIGTERM", () => server.close(() => process.exit(0)));
