/* A minimal web UI, as llama-server serves one at "/" (--no-ui turns it off): one page
 * that chats through /v1/chat/completions (streamed), and the small files browsers ask a
 * web app for (a service worker that caches nothing, a manifest, a version). Static text,
 * no API key needed (the page sends the key the user types to the API routes). */
#include <stdlib.h>
#include "core/fpguard.h"
#include <string.h>

#include "server/srv.h"

static const char k_page[] =
    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<title>seqkv serve</title><link rel=\"manifest\" href=\"manifest.webmanifest\">\n"
    "<style>body{font:15px system-ui,sans-serif;max-width:46em;margin:2em auto;padding:0 1em}"
    "#log div{white-space:pre-wrap;margin:.6em 0}.user{color:#235}.assistant{color:#222}"
    "textarea{width:100%;height:5em}input{width:14em}</style></head><body>\n"
    "<h1>seqkv serve</h1><p>A chat with the model over <code>/v1/chat/completions</code>; the "
    "conversation's KV cache is the server's prompt cache (and its store with <code>--store</code>).</p>\n"
    "<div id=\"log\"></div><textarea id=\"msg\" placeholder=\"Message (Ctrl+Enter sends)\"></textarea><br>\n"
    "<button id=\"send\">Send</button> <button id=\"clear\">New chat</button> "
    "API key: <input id=\"key\" type=\"password\">\n<script>\n"
    "const log=document.getElementById('log'),msg=document.getElementById('msg');let hist=[];\n"
    "function show(role,text){const d=document.createElement('div');d.className=role;"
    "d.textContent=(role==='user'?'> ':'')+text;log.appendChild(d);return d;}\n"
    "async function send(){const text=msg.value.trim();if(!text)return;msg.value='';"
    "hist.push({role:'user',content:text});show('user',text);const out=show('assistant','');"
    "const key=document.getElementById('key').value,h={'Content-Type':'application/json'};"
    "if(key)h.Authorization='Bearer '+key;"
    "const r=await fetch('v1/chat/completions',{method:'POST',headers:h,body:JSON.stringify("
    "{messages:hist,stream:true})});"
    "if(!r.ok){out.textContent='error '+r.status+': '+await r.text();hist.pop();return;}"
    "const rd=r.body.getReader(),dec=new TextDecoder();let buf='',reply='';"
    "for(;;){const {done,value}=await rd.read();if(done)break;buf+=dec.decode(value,{stream:true});"
    "let i;while((i=buf.indexOf('\\n\\n'))>=0){const ev=buf.slice(0,i);buf=buf.slice(i+2);"
    "if(!ev.startsWith('data: ')||ev==='data: [DONE]')continue;const d=JSON.parse(ev.slice(6));"
    "const c=d.choices&&d.choices[0]&&d.choices[0].delta&&d.choices[0].delta.content;"
    "if(c){reply+=c;out.textContent=reply;}}}hist.push({role:'assistant',content:reply});}\n"
    "document.getElementById('send').onclick=send;"
    "msg.onkeydown=e=>{if(e.key==='Enter'&&e.ctrlKey)send();};"
    "document.getElementById('clear').onclick=()=>{hist=[];log.textContent='';};\n"
    "</script></body></html>\n";

static const char k_sw[] = "/* seqkv serve: a service worker that caches nothing */\n"
                           "self.addEventListener('fetch', () => {});\n";

static const char k_manifest[] = "{\"name\":\"seqkv serve\",\"short_name\":\"seqkv\",\"start_url\":\".\","
                                 "\"display\":\"standalone\"}\n";

static const struct asset { const char *path, *type, *body; } k_assets[] = {
    {"/", "text/html; charset=utf-8", k_page},
    {"/index.html", "text/html; charset=utf-8", k_page},
    {"/sw.js", "text/javascript", k_sw},
    {"/manifest.webmanifest", "application/manifest+json", k_manifest},
    {"/_app/version.json", "application/json", "{\"version\":\"" SEQKV_VERSION_STRING "\"}\n"},
};

int srv_rt_webui(srv_req *r)
{
    if (r->s->p.no_ui) return srv_reply_error(r, 404, "File Not Found");
    for (size_t i = 0; i < sizeof k_assets / sizeof *k_assets; i++)
        if (!strcmp(k_assets[i].path, r->url)) {
            char *t = strdup(k_assets[i].body);
            return t ? srv_reply_text(r, 200, k_assets[i].type, t) : srv_reply_error(r, 500, "out of memory");
        }
    return srv_reply_error(r, 404, "File Not Found");
}
