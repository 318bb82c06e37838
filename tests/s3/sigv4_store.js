// sigv4_store.js — a small S3 store for tests/s3/test_s3_sigv4.sh that checks every request's AWS
// Signature V4 with AWS's own signer (@smithy/signature-v4, the AWS SDK for JavaScript's; SHA-256
// from @aws-crypto/sha256-js), as S3 does: the request as received (method, the key decoded then
// encoded as the SDK's S3 client encodes it, the query decoded, the headers the client listed in
// SignedHeaders, x-amz-date) signed again with the true secret (and session token); a signature
// that differs is answered 403 SignatureDoesNotMatch, an unknown key 403 InvalidAccessKeyId, an
// x-amz-* header (or Host) left out of SignedHeaders 403 AccessDenied, a missing or wrong session
// token 403 InvalidToken.
//
// Usage: node sigv4_store.js PORT DIR LOG KEY SECRET [TOKEN]
//   env SIGV4_REGION (default us-east-1), SIGV4_VHOST (e.g. s3.localhost: BUCKET.s3.localhost:PORT
//   is virtual-host style), SIGV4_MODULES (where node_modules is: data/npm/sigv4/node_modules).
// It serves what tessera sends: PUT (object, UploadPart), GET and HEAD (whole or one byte range), POST
// ?uploads= (CreateMultipartUpload: upload ids with '+', '/' and '=', as real ones have), POST
// ?uploadId= (CompleteMultipartUpload: the parts joined in the order given, ETags checked), DELETE
// ?uploadId= (AbortMultipartUpload). Objects are files DIR/BUCKET/HEX (HEX: the key's UTF-8 bytes
// in hex). Two faults on purpose: part 3 of an upload whose key has a segment "fail-part" is
// answered 500 (the client then aborts the upload: its DELETE is checked too), and a GET of a key
// with a segment "esc-code" is answered 400 with terminal escape bytes in its <Code> (a HEAD 200,
// as if it were there). One
// line per request to LOG: "METHOD STYLE BUCKET KEY ?QUERY STATUS CODE", where STYLE is path or
// vhost and KEY is the decoded key; before it, "# CODE: why" for each refusal, and on a signature
// mismatch "# canonical request: ..." (the AWS signer's, \n as |). Stopped by PID.
"use strict";
const http = require("http");
const fs = require("fs");
const path = require("path");
const crypto = require("crypto");

const [PORT, DIR, LOG, KEY, SECRET, TOKEN] = process.argv.slice(2);
const REGION = process.env.SIGV4_REGION || "us-east-1";
const VHOST = process.env.SIGV4_VHOST || "";
const MODULES = process.env.SIGV4_MODULES || path.join(__dirname, "node_modules");
const { SignatureV4 } = require(path.join(MODULES, "@smithy/signature-v4"));
const { Sha256 } = require(path.join(MODULES, "@aws-crypto/sha256-js"));
const { escapeUriPath } = require(path.join(MODULES, "@smithy/core/protocols"));

const signer = new SignatureV4({
    credentials: { accessKeyId: KEY, secretAccessKey: SECRET, sessionToken: TOKEN || undefined },
    region: REGION, service: "s3", sha256: Sha256, uriEscapePath: false, applyChecksum: true,
});
const uploads = new Map(); // upload id -> { bucket, key, parts: Map(number -> Buffer) }

function log(line) { fs.appendFileSync(LOG, line + "\n"); }

function xmlError(res, status, code, message) {
    log(`# ${code}: ${message}`);
    const body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code>` +
        `<Message>${message}</Message></Error>`;
    res.writeHead(status, { "Content-Type": "application/xml", "Content-Length": Buffer.byteLength(body) });
    res.end(body);
    return [status, code];
}

// The bucket, the decoded key and the style of a request's host and path ("/b/k" or "/k").
function locate(req) {
    const host = (req.headers.host || "").replace(/:\d+$/, "");
    const raw = req.url.split("?")[0];
    const segs = raw.split("/").slice(1).map(decodeURIComponent);
    if (VHOST && host.endsWith("." + VHOST)) {
        return { style: "vhost", bucket: host.slice(0, -VHOST.length - 1), key: segs.join("/") };
    }
    return { style: "path", bucket: segs[0] || "", key: segs.slice(1).join("/") };
}

// The query string as the signer takes it: decoded names and values ("uploads" -> "").
function parseQuery(url) {
    const q = {};
    const i = url.indexOf("?");
    if (i < 0) return q;
    for (const part of url.slice(i + 1).split("&")) {
        if (!part) continue;
        const eq = part.indexOf("=");
        const k = decodeURIComponent(eq < 0 ? part : part.slice(0, eq));
        q[k] = eq < 0 ? "" : decodeURIComponent(part.slice(eq + 1));
    }
    return q;
}

function parseAuth(h) {
    const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/s3\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/.exec(h || "");
    return m && { key: m[1], date: m[2], region: m[3], signed: m[4].split(";"), signature: m[5] };
}

function amzDate(s) {
    const m = /^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z$/.exec(s || "");
    return m && new Date(Date.UTC(+m[1], m[2] - 1, +m[3], +m[4], +m[5], +m[6]));
}

// null when the signature holds, else [status, code] after the answer.
async function verify(req, res, where) {
    const auth = parseAuth(req.headers.authorization);
    if (!auth) return xmlError(res, 403, "AccessDenied", "no AWS4-HMAC-SHA256 Authorization header");
    if (auth.key !== KEY) return xmlError(res, 403, "InvalidAccessKeyId", "unknown access key");
    const date = amzDate(req.headers["x-amz-date"]);
    if (!date || auth.region !== REGION) {
        return xmlError(res, 403, "AuthorizationHeaderMalformed", "bad x-amz-date or region");
    }
    const unsigned = Object.keys(req.headers).filter(
        (h) => (h === "host" || h.startsWith("x-amz-")) && !auth.signed.includes(h));
    if (unsigned.length) return xmlError(res, 403, "AccessDenied", "unsigned headers: " + unsigned);
    if ((req.headers["x-amz-security-token"] || "") !== (TOKEN || "")) {
        return xmlError(res, 403, "InvalidToken", "the session token is not the store's");
    }
    const headers = {};
    for (const h of auth.signed) {
        if (req.headers[h] === undefined) return xmlError(res, 403, "AccessDenied", "signed header missing: " + h);
        headers[h] = req.headers[h];
    }
    const keyPath = escapeUriPath(where.key);
    const request = {
        method: req.method, protocol: "http:", hostname: headers.host.replace(/:\d+$/, ""),
        path: where.style === "vhost" ? "/" + keyPath : "/" + where.bucket + (where.key ? "/" + keyPath : ""),
        query: parseQuery(req.url), headers,
    };
    const signed = await signer.sign(request, {
        signingDate: date, signingRegion: REGION, signingService: "s3", signableHeaders: new Set(auth.signed),
    });
    const want = parseAuth(signed.headers.authorization);
    if (want.signature === auth.signature && want.signed.join(";") === auth.signed.join(";")) return null;
    const canon = signer.createCanonicalRequest(signed, Object.fromEntries(
        want.signed.map((h) => [h, String(signed.headers[h]).trim().replace(/[ \t]+/g, " ")])),
        signed.headers["x-amz-content-sha256"]);
    log("# canonical request: " + canon.replace(/\n/g, "|"));
    return xmlError(res, 403, "SignatureDoesNotMatch", "the signature is not the one computed with the secret");
}

function objPath(bucket, key) {
    return path.join(DIR, bucket, Buffer.from(key, "utf8").toString("hex") || "-");
}
function etagOf(buf) { return '"' + crypto.createHash("md5").update(buf).digest("hex") + '"'; }

function getObject(req, res, where) {
    let body;
    try { body = fs.readFileSync(objPath(where.bucket, where.key)); } catch (e) {
        return xmlError(res, 404, "NoSuchKey", "no such key");
    }
    const etag = fs.existsSync(objPath(where.bucket, where.key) + ".etag") ?
        fs.readFileSync(objPath(where.bucket, where.key) + ".etag", "utf8") : etagOf(body);
    const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range || "");
    if (m) {
        const a = +m[1], b = Math.min(+m[2], body.length - 1);
        if (a >= body.length) return xmlError(res, 416, "InvalidRange", "range not satisfiable");
        res.writeHead(206, { "Content-Length": b - a + 1, ETag: etag, "Content-Range": `bytes ${a}-${b}/${body.length}` });
        res.end(body.subarray(a, b + 1));
        return [206, "-"];
    }
    res.writeHead(200, { "Content-Length": body.length, ETag: etag });
    res.end(body);
    return [200, "-"];
}

function putObject(res, where, body, etag) {
    fs.mkdirSync(path.join(DIR, where.bucket), { recursive: true });
    fs.writeFileSync(objPath(where.bucket, where.key), body);
    fs.writeFileSync(objPath(where.bucket, where.key) + ".etag", etag);
    res.writeHead(200, { ETag: etag, "Content-Length": 0 });
    res.end();
    return [200, "-"];
}

function xmlAnswer(res, xml) {
    res.writeHead(200, { "Content-Type": "application/xml", "Content-Length": Buffer.byteLength(xml) });
    res.end(xml);
    return [200, "-"];
}

function multipart(req, res, where, q, body) {
    const u = q.uploadId !== undefined ? uploads.get(q.uploadId) : null;
    if (q.uploadId !== undefined && (!u || u.bucket !== where.bucket || u.key !== where.key)) {
        return xmlError(res, 404, "NoSuchUpload", "no such upload");
    }
    if (req.method === "POST" && q.uploads !== undefined) {
        const id = crypto.randomBytes(18).toString("base64").replace(/^(.)/, "$1+/") + "==";
        uploads.set(id, { bucket: where.bucket, key: where.key, parts: new Map() });
        return xmlAnswer(res, `<InitiateMultipartUploadResult><Bucket>${where.bucket}</Bucket>` +
            `<UploadId>${id}</UploadId></InitiateMultipartUploadResult>`);
    }
    if (req.method === "PUT" && u && q.partNumber === "3" && where.key.split("/").includes("fail-part")) {
        return xmlError(res, 500, "InternalError", "part 3 of a fail-part key fails");
    }
    if (req.method === "PUT" && u) {
        u.parts.set(+q.partNumber, body);
        res.writeHead(200, { ETag: etagOf(body), "Content-Length": 0 });
        res.end();
        return [200, "-"];
    }
    if (req.method === "DELETE" && u) {
        uploads.delete(q.uploadId);
        res.writeHead(204);
        res.end();
        return [204, "-"];
    }
    const listed = [...body.toString().matchAll(/<PartNumber>(\d+)<\/PartNumber><ETag>([^<]*)<\/ETag>/g)];
    const bufs = listed.map(([, n, e]) => (u.parts.has(+n) && etagOf(u.parts.get(+n)) === e ? u.parts.get(+n) : null));
    if (!listed.length || bufs.includes(null)) return xmlError(res, 400, "InvalidPart", "a part is missing");
    uploads.delete(q.uploadId);
    const md5s = Buffer.concat(bufs.map((b) => crypto.createHash("md5").update(b).digest()));
    putObject({ writeHead() {}, end() {} }, where, Buffer.concat(bufs),
        '"' + crypto.createHash("md5").update(md5s).digest("hex") + "-" + bufs.length + '"');
    return xmlAnswer(res, `<CompleteMultipartUploadResult><Key>${where.key}</Key></CompleteMultipartUploadResult>`);
}

async function handle(req, res, body) {
    const where = locate(req);
    const q = parseQuery(req.url);
    const bad = await verify(req, res, where);
    if (bad) return bad;
    if (q.uploads !== undefined || q.uploadId !== undefined) return multipart(req, res, where, q, body);
    if (where.key.split("/").includes("esc-code")) { /* HEAD: "there"; GET: a hostile error */
        if (req.method === "HEAD") return xmlAnswer(res, "");
        return xmlError(res, 400, "Bad\x1b[31mRed\x1b]0;owned\x07Code", "terminal escapes in the code");
    }
    if (req.method === "GET" || req.method === "HEAD") return getObject(req, res, where);
    if (req.method === "PUT") return putObject(res, where, body, etagOf(body));
    return xmlError(res, 405, "MethodNotAllowed", req.method + " is not served here");
}

http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
        const where = locate(req);
        handle(req, res, Buffer.concat(chunks)).then(([status, code]) => {
            const i = req.url.indexOf("?");
            log(`${req.method} ${where.style} ${where.bucket} ${where.key} ?${i < 0 ? "" : req.url.slice(i + 1)} ${status} ${code}`);
        }, (e) => {
            log(`# error: ${e.stack}`);
            xmlError(res, 500, "InternalError", "the test store failed");
        });
    });
}).listen(+PORT, "127.0.0.1", () => log("listening"));
