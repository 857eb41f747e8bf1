"use strict";
// The dashboard's other pages: tuning jobs, comparing jobs' metrics, warm pools, costs.
(() => {
  const { h, PALETTE, lineChart, scatterChart, barChart, fmtNumber, fmtSeconds } = window.charts;
  const { route, api, card, table, badge, money, clock, epochOf, jobLink, duration, debounce, fact, showError,
          TERMINAL, POLL_MS, swatch } = window.shipyard;
  const tuningLink = (name) => h("a", { href: `#/tuning/${encodeURIComponent(name)}` }, name);

  // -- tuning jobs ------------------------------------------------------------------------------
  route(/^\/tuning$/, (app, page) => {
    const { el, tbody } = table(["Name", "Status", "Strategy", "Objective", "Jobs#", "Best#", "Best job", "Created"], "tuning");
    app.append(h("h1", {}, "Hyperparameter tuning jobs"), card(null, el));
    page.every(POLL_MS * 2, async () => {
      const rows = await api("/api/tuning", { signal: page.signal() });
      tbody.replaceChildren(...rows.map((t) => h("tr", { dataset: { tuning: t.name } },
        h("td", { class: "name" }, tuningLink(t.name)), h("td", {}, badge(t.status)), h("td", {}, t.strategy),
        h("td", {}, t.objective_type), h("td", { class: "num" }, `${t.jobs_done}/${t.jobs_total}`),
        h("td", { class: "num" }, t.best_value === null ? "-" : fmtNumber(t.best_value)),
        h("td", { class: "name" }, t.best_job ? jobLink(t.best_job) : "-"), h("td", {}, clock(t.creation_time)))));
      if (!rows.length) tbody.append(h("tr", {}, h("td", { colspan: 8, class: "empty" }, "no tuning jobs yet")));
    });
  });

  route(/^\/tuning\/(.+)$/, (app, page, [name]) => {
    const header = h("div", {});
    const stopArea = h("div", { class: "row" });
    const trials = h("div", {});
    const objective = h("div", { id: "objective-chart" });
    const hps = h("div", { id: "hp-charts", class: "charts" });
    app.append(h("h1", { id: "tuning-name" }, name), header, card("Objective by trial", objective),
               card("Each hyperparameter against the objective", hps), card("Trials", trials));
    const refresh = async () => {
      const data = await api(`/api/tuning/${encodeURIComponent(name)}`, { signal: page.signal() });
      if (!page.alive) return null;
      const d = data.describe;
      const config = d.HyperParameterTuningJobConfig || {};
      const goal = config.HyperParameterTuningJobObjective || (d.TrainingJobDefinitions && d.TrainingJobDefinitions[0].TuningObjective) || {};
      const minimize = goal.Type !== "Maximize";
      const best = d.BestTrainingJob;
      header.replaceChildren(h("div", { class: "row" }, badge(d.HyperParameterTuningJobStatus), h("span", { class: "spacer" }), stopArea),
        h("div", { class: "facts" }, fact("Strategy", config.Strategy || "-"), fact("Objective", `${goal.Type || ""} ${goal.MetricName || ""}`),
          fact("Jobs", `${data.trials.filter((t) => TERMINAL.has(t.status)).length} done of ${(config.ResourceLimits || {}).MaxNumberOfTrainingJobs || data.trials.length}`),
          fact("Best", best ? fmtNumber(best.FinalHyperParameterTuningJobObjectiveMetric.Value) : "-"),
          fact("Best job", best ? jobLink(best.TrainingJobName) : "-"), fact("Cost", money((d.Shipyard && d.Shipyard.Cost || {}).Amount))));
      renderTuningStop(stopArea, d.HyperParameterTuningJobStatus, name);
      const scored = data.trials.filter((t) => typeof t.objective === "number");
      const bestTrial = scored.length ? scored.reduce((a, b) => ((minimize ? b.objective < a.objective : b.objective > a.objective) ? b : a)) : null;
      let running = null;
      const line = scored.map((t) => {
        running = running === null ? t.objective : (minimize ? Math.min(running, t.objective) : Math.max(running, t.objective));
        return [t.trial, running];
      });
      objective.replaceChildren(scatterChart({
        points: scored.map((t) => ({ x: t.trial, y: t.objective, cls: t === bestTrial ? "trial highlight" : "trial",
                                     color: t.status === "Stopped" ? "#c27c0e" : PALETTE[0],
                                     title: `trial ${t.trial} (${t.job}): ${fmtNumber(t.objective)}` })),
        lines: line.length ? [{ name: `best so far (${minimize ? "lowest" : "highest"})`, points: line, step: true, cls: "best", color: PALETTE[3] }] : [],
        xLabel: "trial", yLabel: goal.MetricName || "objective", width: 1100, height: 300, xInteger: true,
        legendItems: [["trial objective", PALETTE[0]], ["stopped early", "#c27c0e"], ["best so far", PALETTE[3]]] }));
      const names = [...new Set(data.trials.flatMap((t) => Object.keys(t.hyperparameters)))];
      hps.replaceChildren(...names.map((hp) => {
        const values = scored.map((t) => t.hyperparameters[hp]);
        const numeric = values.every((v) => typeof v === "number");
        const categories = numeric ? null : [...new Set(values.map(String))].sort();
        const positive = numeric && values.length && values.every((v) => v > 0);
        const xLog = positive && Math.max(...values) / Math.min(...values) > 100;
        const chart = scatterChart({
          points: scored.map((t) => ({ x: numeric ? t.hyperparameters[hp] : categories.indexOf(String(t.hyperparameters[hp])),
                                       y: t.objective, cls: t === bestTrial ? "highlight" : null, color: PALETTE[1],
                                       title: `trial ${t.trial}: ${hp}=${t.hyperparameters[hp]} → ${fmtNumber(t.objective)}` })),
          title: hp, xLabel: hp + (xLog ? " (log scale)" : ""), yLabel: goal.MetricName || "objective", xLog,
          xCategories: categories, cls: "hp", dataset: { hp } });
        return chart;
      }));
      const { el, tbody } = table(["#", "Job", "Status", "Objective#", ...names, "Stopped because"], "trials");
      tbody.append(...data.trials.map((t) => h("tr", { dataset: { trial: t.trial } }, h("td", { class: "num" }, t.trial),
        h("td", { class: "name" }, jobLink(t.job)), h("td", {}, badge(t.status)),
        h("td", { class: "num" }, t.objective === null ? "-" : fmtNumber(t.objective)),
        ...names.map((hp) => h("td", { class: "num" }, typeof t.hyperparameters[hp] === "number" ? fmtNumber(t.hyperparameters[hp]) : String(t.hyperparameters[hp] ?? "-"))),
        h("td", {}, t.stop_reason || ""))));
      trials.replaceChildren(el);
      return d.HyperParameterTuningJobStatus;
    };
    const loop = async () => {
      const status = await refresh();
      if (page.alive && status && !TERMINAL.has(status)) page.later(POLL_MS, loop);
    };
    return loop();
  });

  function renderTuningStop(area, status, name) {
    if (status !== "InProgress") { area.replaceChildren(); return; }
    if (area.childElementCount) return;
    const confirm = h("button", { id: "stop-tuning-confirm", class: "danger confirm", type: "button", onclick: async () => {
      try {
        await api(`/api/tuning/${encodeURIComponent(name)}/stop`, { method: "POST" });
        area.replaceChildren(h("span", { class: "muted" }, "stopping…"));
      } catch (error) { area.replaceChildren(); showError(error); }
    } }, "Stop the tuning job and its running jobs");
    area.replaceChildren(h("button", { id: "stop-tuning", class: "danger", type: "button", onclick: () => area.replaceChildren(confirm) }, "Stop"));
  }

  // -- compare --------------------------------------------------------------------------------
  route(/^\/compare$/, async (app, page, _, params) => {
    const chosen = (params.get("jobs") || "").split(",").map((n) => n.trim()).filter(Boolean);
    const input = h("input", { type: "search", id: "compare-add", list: "compare-jobs", placeholder: "add a job by name…" });
    const options = h("datalist", { id: "compare-jobs" });
    const setJobs = (names) => { location.hash = `#/compare?jobs=${names.map(encodeURIComponent).join(",")}`; };
    const add = () => { const n = input.value.trim(); if (n && !chosen.includes(n)) setJobs([...chosen, n]); };
    const chips = h("div", { class: "chips" }, chosen.map((n, i) => h("span", { class: "chip" }, swatch(PALETTE[i % PALETTE.length]), n,
      h("button", { type: "button", "aria-label": `remove ${n}`, onclick: () => setJobs(chosen.filter((x) => x !== n)) }, "×"))));
    const charts = h("div", { class: "charts" });
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") add(); });
    app.append(h("h1", {}, "Compare jobs"), card(null, h("div", { class: "row" }, input, options,
      h("button", { id: "compare-add-button", type: "button", onclick: add }, "Add")), chips,
      chosen.length < 2 ? h("div", { class: "muted" }, "Pick two or more jobs (or tick them in the jobs table).") : null), card("Metrics", charts));
    api("/api/jobs?limit=200", { signal: page.signal() }).then((data) =>
      options.replaceChildren(...data.jobs.map((j) => h("option", { value: j.name })))).catch(showError);
    const refresh = async () => {
      const all = await Promise.all(chosen.map((n) => api(`/api/jobs/${encodeURIComponent(n)}/metrics`, { signal: page.signal() })));
      if (!page.alive) return;
      const metrics = [...new Set(all.flatMap((m) => Object.keys(m.metrics)))].sort();
      charts.replaceChildren(...metrics.map((metric) => lineChart({
        title: metric, cls: "compare", dataset: { metric }, xLabel: "seconds since training started", xFormat: fmtSeconds, alwaysLegend: true,
        series: chosen.map((n, i) => {
          const hosts = all[i].metrics[metric] || {};
          const host = hosts["algo-1"] ? "algo-1" : Object.keys(hosts).sort()[0];
          const start = all[i].training_start_time || 0;
          return { name: n, color: PALETTE[i % PALETTE.length], dataset: { job: n },
                   points: host ? hosts[host].map(([ts, v]) => [ts - start, v]) : [] };
        }).filter((one) => one.points.length) })));
      if (!metrics.length) charts.append(h("div", { class: "empty" }, chosen.length ? "these jobs have no metrics" : "no jobs chosen"));
    };
    if (chosen.length) page.every(POLL_MS * 2, refresh);
  });

  // -- warm pools -----------------------------------------------------------------------------
  route(/^\/pools$/, (app, page) => {
    const { el, tbody } = table(["Pool", "Status", "Instances", "Backend", "Job", "Expires in#", "Ended", ""], "pools");
    app.append(h("h1", {}, "Warm pools"), card(null, el,
      h("p", { class: "muted" }, "A job with keep_alive_period_in_seconds leaves its instances warm for the next matching job.")));
    let pools = [];
    const countdowns = () => {
      for (const row of tbody.querySelectorAll("tr[data-pool]")) {
        const pool = pools.find((p) => p.name === row.dataset.pool);
        if (pool && pool.expires_at) row.querySelector(".expires").textContent = duration(pool.expires_at - Date.now() / 1000);
      }
    };
    const refresh = async () => {
      pools = await api("/api/pools", { signal: page.signal() });
      if (!page.alive) return;
      tbody.replaceChildren(...pools.map((p) => {
        const action = h("td", {});
        if (p.status === "Available") {
          const confirm = h("button", { class: "danger confirm release-confirm", type: "button", onclick: async () => {
            try { await api(`/api/pools/${encodeURIComponent(p.name)}/release`, { method: "POST" }); await refresh(); }
            catch (error) { showError(error); }
          } }, "Release now");
          action.append(h("button", { class: "danger release", type: "button", onclick: () => action.replaceChildren(confirm) }, "Release"));
        }
        return h("tr", { dataset: { pool: p.name } }, h("td", { class: "name" }, p.name), h("td", {}, badge(p.status)),
          h("td", {}, `${p.instance_count} x ${p.instance_type}`), h("td", {}, p.backend), h("td", { class: "name" }, jobLink(p.job)),
          h("td", { class: "num expires" }, p.expires_at ? duration(p.expires_in) : "-"),
          h("td", {}, p.end_time ? `${clock(p.end_time)}${p.end_reason ? ` (${p.end_reason})` : ""}` : ""), action);
      }));
      if (!pools.length) tbody.append(h("tr", {}, h("td", { colspan: 8, class: "empty" }, "no warm pools")));
    };
    page.every(POLL_MS * 2, refresh);
    page.timers.push(setInterval(countdowns, 1000));
  });

  // -- costs ----------------------------------------------------------------------------------
  route(/^\/costs$/, (app, page, _, params) => {
    const since = h("select", { id: "since" }, [["7d", "last 7 days"], ["30d", "last 30 days"], ["90d", "last 90 days"], ["", "all time"]]
      .map(([v, label]) => h("option", { value: v }, label)));
    since.value = params.has("since") ? params.get("since") : "30d";
    since.addEventListener("change", () => { location.hash = `#/costs?since=${since.value}`; });
    const headline = h("div", { class: "headline" });
    const byDay = h("div", { id: "costs-by-day" }), byPrefix = h("div", { id: "costs-by-prefix" }), byTag = h("div", { id: "costs-by-tag" });
    app.append(h("div", { class: "row" }, h("h1", {}, "Costs"), h("span", { class: "spacer" }), since),
      card(null, headline), card("By day: cost beside what on demand would have cost", byDay),
      h("div", { class: "grid2" }, card("By job name prefix", byPrefix), card("By tag", byTag)));
    const query = (by) => `/api/costs?by=${by}${since.value ? `&since=${since.value}` : ""}`;
    const refresh = async () => {
      const [day, prefix, tag] = await Promise.all(["day", "prefix", "tag"].map((by) => api(query(by), { signal: page.signal() })));
      if (!page.alive) return;
      const total = day.rows[day.rows.length - 1];
      headline.replaceChildren(
        h("div", {}, h("div", { class: "muted" }, "Cost"), h("div", { class: "big", id: "cost-total" }, money(total.cost)), h("div", { class: "muted" }, `${total.jobs} jobs`)),
        h("div", {}, h("div", { class: "muted" }, "On demand would have cost"), h("div", { class: "big" }, money(total.on_demand))),
        h("div", {}, h("div", { class: "muted" }, "Spot savings"), h("div", { class: "big", id: "cost-savings" }, money(total.spot_savings))),
        h("div", {}, h("div", { class: "muted" }, "Warm pools retained"), h("div", { class: "big" }, money(total.warm_pool_retained))));
      const days = day.rows.slice(0, -1).reverse();
      byDay.replaceChildren(barChart({ cls: "costs", yFormat: (v) => `$${fmtNumber(v)}`, width: 1100, height: 260,
        groups: days.map((r) => ({ label: r.day.slice(5), bars: [
          { value: r.cost, cls: "cost", color: PALETTE[0], title: `${r.day}: ${money(r.cost)} (${r.jobs} jobs)` },
          { value: r.on_demand, cls: "on-demand", color: "#c7d5e4", title: `${r.day}: on demand ${money(r.on_demand)}` }] })),
        legendItems: [["cost", PALETTE[0]], ["on demand", "#c7d5e4"]] }));
      byPrefix.replaceChildren(costTable(prefix.rows, "prefix"));
      byTag.replaceChildren(costTable(tag.rows, "tag"));
    };
    page.every(POLL_MS * 5, refresh);
  });

  function costTable(rows, key) {
    const body = rows.slice(0, -1);
    const top = Math.max(1e-9, ...body.map((r) => r.on_demand));
    const { el, tbody } = table([key, "Jobs#", "Cost$", "", "Savings$"], `costs-${key}`);
    tbody.append(...body.map((r) => {
      const bar = h("div", { class: "bar" }), od = h("div", { class: "bar od" });
      bar.style.width = `${(100 * r.cost) / top}%`;
      od.style.width = `${(100 * r.on_demand) / top}%`;
      return h("tr", {}, h("td", { class: "name" }, r[key]), h("td", { class: "num" }, r.jobs), h("td", { class: "num" }, money(r.cost)),
        h("td", { class: "bars" }, bar, od), h("td", { class: "num" }, money(r.spot_savings)));
    }));
    if (!body.length) tbody.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "no jobs")));
    return el;
  }
})();
