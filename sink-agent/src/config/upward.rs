//! The upward channel's settings (`upward:` in the file, `--istiod-*` and
//! `--mcs-*` flags): what the agent reports about its cluster to the hub.

use std::path::PathBuf;
use std::time::Duration;

use meshhub_proto::upward::GatewayAddress;
use serde::Deserialize;

use super::{ConfigError, values};
use crate::upward::mcs::{Gateway, McsConfig};
use crate::upward::{
    DEFAULT_ISTIOD_INTERVAL, DEFAULT_REPORT_INTERVAL, IstiodCheck, IstiodVersionCheck, UpwardConfig,
};

/// Flags of the upward channel (flattened into [`super::Args`]).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct UpwardArgs {
    /// How often the cluster status report is rebuilt (published to the
    /// hub only when it changed) [default: 1s].
    #[arg(long, env = "MESHHUB_AGENT_REPORT_INTERVAL", value_name = "DURATION", value_parser = values::duration)]
    pub report_interval: Option<Duration>,

    /// The cluster's istiod HTTP debug address (`http://istiod.istio-system:8080`):
    /// the agent compares what it serves with istiod's `/debug/configz` and
    /// reports the objects istiod dropped [default: none: not compared].
    #[arg(long, env = "MESHHUB_AGENT_ISTIOD_DEBUG_URL")]
    pub istiod_debug_url: Option<String>,

    /// istiod's monitoring address (`http://istiod.istio-system:15014`):
    /// the agent reads istiod's release from its `/version` and reports it
    /// (version skew, MH0002) [default: none: only the releases its
    /// consumers announce].
    #[arg(long, env = "MESHHUB_AGENT_ISTIOD_VERSION_URL")]
    pub istiod_version_url: Option<String>,

    /// How often istiod's view (and release) is read [default: 5s].
    #[arg(long, env = "MESHHUB_AGENT_ISTIOD_CHECK_INTERVAL", value_name = "DURATION", value_parser = values::duration)]
    pub istiod_check_interval: Option<Duration>,

    /// Watch `ServiceExport`s (multicluster.x-k8s.io) and report the
    /// exported Services to the hub [default: false].
    #[arg(long, env = "MESHHUB_AGENT_MCS", num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", value_parser = values::boolean)]
    pub mcs: Option<bool>,

    /// MCS: the kubeconfig [default: KUBECONFIG, ~/.kube/config or
    /// in-cluster].
    #[arg(long, env = "MESHHUB_AGENT_MCS_KUBECONFIG")]
    pub mcs_kubeconfig: Option<PathBuf>,

    /// MCS: the kubeconfig context [default: its current context].
    #[arg(long, env = "MESHHUB_AGENT_MCS_CONTEXT")]
    pub mcs_context: Option<String>,

    /// MCS: the cluster's east-west gateway addresses, `host:port`,
    /// comma-separated (other clusters reach exported Services there).
    #[arg(long, env = "MESHHUB_AGENT_MCS_GATEWAYS", value_delimiter = ',')]
    pub mcs_gateways: Option<Vec<String>>,

    /// MCS: the gateway Service to read the addresses from instead,
    /// `namespace/name` (type LoadBalancer: its ingress; NodePort: its
    /// external IPs and node port).
    #[arg(long, env = "MESHHUB_AGENT_MCS_GATEWAY_SERVICE")]
    pub mcs_gateway_service: Option<String>,

    /// MCS: the name of the gateway Service's port [default: its first].
    #[arg(long, env = "MESHHUB_AGENT_MCS_GATEWAY_PORT")]
    pub mcs_gateway_port: Option<String>,
}

/// `upward:` in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawUpward {
    report_interval: Option<String>,
    istiod: Option<RawIstiod>,
    mcs: Option<RawMcs>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawIstiod {
    debug_url: Option<String>,
    version_url: Option<String>,
    check_interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawMcs {
    enabled: Option<bool>,
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    gateways: Option<Vec<String>>,
    gateway_service: Option<String>,
    gateway_port: Option<String>,
}

fn invalid(setting: &str, message: String) -> ConfigError {
    ConfigError::Invalid {
        setting: setting.to_owned(),
        message,
    }
}

fn duration(
    flag: Option<Duration>,
    file: Option<String>,
    key: &str,
) -> Result<Option<Duration>, ConfigError> {
    match (flag, file) {
        (Some(d), _) => Ok(Some(d)),
        (None, Some(t)) => values::duration(&t).map(Some).map_err(|m| invalid(key, m)),
        (None, None) => Ok(None),
    }
}

/// A gateway address: `host:port`.
fn gateway(text: &str) -> Result<GatewayAddress, String> {
    let (host, port) = text
        .trim()
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?} is not host:port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{text:?}: {port:?} is not a port"))?;
    if host.is_empty() || port == 0 {
        return Err(format!("{text:?} is not host:port"));
    }
    Ok(GatewayAddress {
        address: host.trim_matches(['[', ']']).to_owned(),
        port: port.into(),
    })
}

/// The checked settings.
pub(super) fn check(args: UpwardArgs, raw: Option<RawUpward>) -> Result<UpwardConfig, ConfigError> {
    let raw = raw.unwrap_or_default();
    let report_interval = duration(
        args.report_interval,
        raw.report_interval,
        "upward.reportInterval",
    )?
    .unwrap_or(DEFAULT_REPORT_INTERVAL);
    if report_interval < Duration::from_millis(100) {
        return Err(invalid(
            "upward.reportInterval",
            "must be at least 100ms".to_owned(),
        ));
    }
    let raw_istiod = raw.istiod.unwrap_or_default();
    let interval = duration(
        args.istiod_check_interval,
        raw_istiod.check_interval,
        "upward.istiod.checkInterval",
    )?
    .unwrap_or(DEFAULT_ISTIOD_INTERVAL);
    if interval < Duration::from_millis(100) {
        return Err(invalid(
            "upward.istiod.checkInterval",
            "must be at least 100ms".to_owned(),
        ));
    }
    let istiod = args
        .istiod_debug_url
        .or(raw_istiod.debug_url)
        .map(|url| {
            http_url(&url, "upward.istiod.debugUrl").map(|()| IstiodCheck {
                debug_url: url,
                interval,
            })
        })
        .transpose()?;
    let istiod_version = args
        .istiod_version_url
        .or(raw_istiod.version_url)
        .map(|url| {
            http_url(&url, "upward.istiod.versionUrl")
                .map(|()| IstiodVersionCheck { url, interval })
        })
        .transpose()?;
    let raw_mcs = raw.mcs.unwrap_or_default();
    let mcs = if args.mcs.or(raw_mcs.enabled).unwrap_or(false) {
        let kubeconfig = args.mcs_kubeconfig.or(raw_mcs.kubeconfig);
        if let Some(k) = &kubeconfig
            && !k.is_file()
        {
            return Err(invalid(
                "upward.mcs.kubeconfig",
                format!("{} is not a file", k.display()),
            ));
        }
        let gateways = args.mcs_gateways.or(raw_mcs.gateways).unwrap_or_default();
        let service = args.mcs_gateway_service.or(raw_mcs.gateway_service);
        let gateway = match (gateways.is_empty(), service) {
            (false, Some(_)) => {
                return Err(invalid(
                    "upward.mcs.gatewayService",
                    "give either gateways or gatewayService, not both".to_owned(),
                ));
            }
            (true, None) => {
                return Err(invalid(
                    "upward.mcs.gateways",
                    "required with mcs: the addresses other clusters reach this one by (or gatewayService)".to_owned(),
                ));
            }
            (false, None) => Gateway::Addresses(
                gateways
                    .iter()
                    .enumerate()
                    .map(|(i, g)| {
                        gateway(g).map_err(|m| invalid(&format!("upward.mcs.gateways[{i}]"), m))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            (true, Some(s)) => {
                let (namespace, name) = s
                    .split_once('/')
                    .filter(|(n, s)| !n.is_empty() && !s.is_empty())
                    .ok_or_else(|| {
                        invalid(
                            "upward.mcs.gatewayService",
                            format!("{s:?} is not namespace/name"),
                        )
                    })?;
                Gateway::Service {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    port: args.mcs_gateway_port.or(raw_mcs.gateway_port),
                }
            }
        };
        Some(McsConfig {
            connection: meshhub_kube::Connection {
                kubeconfig,
                context: args.mcs_context.or(raw_mcs.context),
            },
            gateway,
        })
    } else {
        None
    };
    Ok(UpwardConfig {
        report_interval,
        istiod,
        istiod_version,
        mcs,
    })
}

/// `url` is an `http://host[:port]` URL (`key` names the setting).
fn http_url(url: &str, key: &str) -> Result<(), ConfigError> {
    let parsed: http::Uri = url
        .parse()
        .map_err(|_| invalid(key, format!("{url:?} is not a URL")))?;
    if parsed.scheme_str() != Some("http") || parsed.host().is_none() {
        return Err(invalid(
            key,
            format!("{url:?}: an http://host:port URL is needed"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_off_and_errors_name_the_key() {
        let c = check(UpwardArgs::default(), None).unwrap();
        assert_eq!(c, UpwardConfig::default());
        let e = check(
            UpwardArgs {
                istiod_debug_url: Some("istiod:8080".into()),
                ..Default::default()
            },
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("upward.istiod.debugUrl:"), "{e}");
        let e = check(
            UpwardArgs {
                mcs: Some(true),
                ..Default::default()
            },
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("upward.mcs.gateways:"), "{e}");
        let e = check(
            UpwardArgs {
                mcs: Some(true),
                mcs_gateways: Some(vec!["192.0.2.1".into()]),
                ..Default::default()
            },
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("upward.mcs.gateways[0]:"), "{e}");
        let c = check(
            UpwardArgs {
                mcs: Some(true),
                mcs_gateways: Some(vec!["192.0.2.1:15443".into()]),
                istiod_debug_url: Some("http://127.0.0.1:8080".into()),
                ..Default::default()
            },
            None,
        )
        .unwrap();
        assert_eq!(c.istiod.as_ref().unwrap().interval, DEFAULT_ISTIOD_INTERVAL);
        assert_eq!(c.istiod_version, None);
        let v = check(
            UpwardArgs {
                istiod_version_url: Some("http://istiod:15014".into()),
                istiod_check_interval: Some(Duration::from_secs(2)),
                ..Default::default()
            },
            None,
        )
        .unwrap();
        assert_eq!(
            v.istiod_version,
            Some(IstiodVersionCheck {
                url: "http://istiod:15014".into(),
                interval: Duration::from_secs(2)
            })
        );
        let e = check(
            UpwardArgs {
                istiod_version_url: Some("istiod:15014".into()),
                ..Default::default()
            },
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("upward.istiod.versionUrl:"), "{e}");
        assert_eq!(
            c.mcs.unwrap().gateway,
            Gateway::Addresses(vec![GatewayAddress {
                address: "192.0.2.1".into(),
                port: 15443
            }])
        );
    }
}
