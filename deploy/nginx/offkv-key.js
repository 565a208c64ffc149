// offkv-key.js — the affinity key of a request for deploy/nginx (njs): the
// X-Prompt-Cache-Key header, else the JSON body's prompt_cache_key, else
// its user; "" when there is none (offkv.conf then picks least_conn).
// Bounded like offkv serve's own check of the header (256 bytes).
function key(r) {
    var h = r.headersIn['X-Prompt-Cache-Key'];
    if (h) return h;
    var body = r.requestText;
    if (!body || body.length > 1048576) return '';
    try {
        var j = JSON.parse(body);
        var k = typeof j.prompt_cache_key === 'string' && j.prompt_cache_key ? j.prompt_cache_key : j.user;
        return typeof k === 'string' ? k.slice(0, 256) : '';
    } catch (e) {
        return '';
    }
}

export default { key };
